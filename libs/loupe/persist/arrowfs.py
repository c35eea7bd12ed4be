"""``ArrowFsBlob``: a blob store on any ``pyarrow.fs`` filesystem (S3-compatible at scale).

URIs:

- ``s3://bucket/prefix?region=…&endpoint_override=host:port&scheme=http`` ->
  ``pyarrow.fs.S3FileSystem`` (the query options are pyarrow's own S3 URI
  options; credentials come from the usual AWS environment variables or
  profile). Any S3-compatible store works (MinIO, Ceph, R2, …).
- ``arrowfs-local:///dir`` -> ``pyarrow.fs.LocalFileSystem`` rooted at ``/dir``:
  the same class and code path as S3 on a local disk, which is how it is
  tested (no fsync: use ``file://`` for a durable local store).

Objects are written to a scratch key next to the target and then moved into
place, so a reader never sees a partial object: on a POSIX disk the move is a
rename; on S3 it is a server-side copy, and an object becomes visible only
once complete anyway (an aborted upload leaves no object).
"""

from __future__ import annotations

import contextlib
import uuid
from urllib.parse import urlparse

import pyarrow.fs as pafs

from loupe.persist.location import Blob

LOCAL_SCHEME = "arrowfs-local"


class ArrowFsBlob(Blob):
    """Objects under ``root`` (a path in ``filesystem``: ``bucket/prefix`` for S3)."""

    def __init__(self, filesystem: pafs.FileSystem, root: str, *, uri: str | None = None) -> None:
        self.filesystem = filesystem
        self.root = root.rstrip("/")
        # Nothing is created (or even contacted) here: ``put`` makes directories
        # where the filesystem has them, when it first needs them.
        self.uri = uri or f"{filesystem.type_name}://{self.root}"

    @classmethod
    def from_uri(cls, uri: str) -> ArrowFsBlob:
        url = urlparse(uri)
        if url.scheme == LOCAL_SCHEME:
            return cls(pafs.LocalFileSystem(), url.netloc + url.path, uri=uri)
        try:
            filesystem, root = pafs.FileSystem.from_uri(uri)
        except (ValueError, OSError) as error:  # pyarrow names the bad option
            raise ValueError(f"blob URI {uri!r}: {error}") from error
        return cls(filesystem, root, uri=uri)

    def _full(self, key: str) -> str:
        return f"{self.root}/{key}"

    def path(self, key: str) -> str:
        """A local path on a local filesystem, else a ``<type>://`` URI (``s3://bucket/key``)."""
        if isinstance(self.filesystem, pafs.LocalFileSystem):
            return self._full(key)
        return f"{self.filesystem.type_name}://{self._full(key)}"

    def filesystem_path(self, key: str) -> tuple[pafs.FileSystem, str]:
        return self.filesystem, self._full(key)

    def put(self, key: str, data: bytes) -> None:
        target = self._full(key)
        directory, _, name = target.rpartition("/")
        # A dot name: pyarrow's dataset discovery skips it if a reader lists
        # the directory while the scratch object exists.
        scratch = f"{directory}/.{name}.{uuid.uuid4().hex}.tmp"
        try:
            try:
                stream = self.filesystem.open_output_stream(scratch)
            except FileNotFoundError:
                # A new directory on a local disk (object stores have none).
                self.filesystem.create_dir(directory, recursive=True)
                stream = self.filesystem.open_output_stream(scratch)
            with stream:
                stream.write(data)
            self.filesystem.move(scratch, target)
        except BaseException:
            with contextlib.suppress(OSError):
                self.filesystem.delete_file(scratch)
            raise

    def get(self, key: str) -> bytes:
        path = self._full(key)
        info = self.filesystem.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"blob {self.uri}: no object {key!r}")
        if info.type != pafs.FileType.File:
            raise IsADirectoryError(f"blob {self.uri}: {key!r} is a directory of objects")
        with self.filesystem.open_input_stream(path) as stream:
            return stream.read()

    def exists(self, key: str) -> bool:
        return self.filesystem.get_file_info(self._full(key)).type != pafs.FileType.NotFound

    def delete(self, key: str) -> None:
        path = self._full(key)
        info = self.filesystem.get_file_info(path)
        # Gone already (a concurrent delete) is what we wanted.
        with contextlib.suppress(FileNotFoundError):
            if info.type == pafs.FileType.Directory:
                self.filesystem.delete_dir(path)
            elif info.type != pafs.FileType.NotFound:
                self.filesystem.delete_file(path)
