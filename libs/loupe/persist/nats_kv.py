"""``NatsKvConsensus``: consensus in a NATS JetStream key-value bucket (DESIGN §3's default).

URI: ``nats://[user:password@]host:port/bucket[?replicas=N&timeout=S]``. The
bucket is created on first use (file storage, history 1, no direct gets: every
read goes to the stream leader, so ``head`` sees every acknowledged write).

CAS is on the KV revision: the first write is ``kv.create`` (it fails if the
key exists), later ones ``kv.update(key, value, last=revision)``, which the
server refuses unless ``revision`` is still the key's latest. Revisions are
stream sequences, shared by all keys, so the seqno of the Consensus API is
stored in the value (8 bytes, big-endian, before the payload); as a key's
seqno only grows, "the revision that holds seqno n" is unique, and a
compare-and-set expecting seqno n can use the revision we last saw it at.

nats-py is asyncio-only while ``Consensus`` is synchronous: the client lives
on a private event loop in a daemon thread, and each call submits a coroutine
to it and waits (``timeout`` seconds, default 10; a timeout leaves a CAS's
outcome unknown, as any lost connection does).

Values must fit in one NATS message (the server's ``max_payload``, 1 MiB by
default): a bigger one fails with ``ValueTooLarge`` naming both sizes. A
shard state costs about 70 bytes per part, so that is some 14,000 parts;
compaction keeps shards far below that.
"""

from __future__ import annotations

import asyncio
import re
import struct
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlparse

import nats
import nats.js.api
import nats.js.errors

from loupe.persist.location import Consensus, ValueTooLarge, forget_shared_consensus

T = TypeVar("T")

BUCKET = re.compile(r"[A-Za-z0-9_-]+")
# Key characters kept as they are; every other byte becomes _XX (so '_' too).
PLAIN_KEY_CHARACTERS = re.compile(r"[A-Za-z0-9-]")
SEQNO = struct.Struct(">Q")
# Room for the subject and the headers of a KV update (expected-last-sequence).
MESSAGE_OVERHEAD = 512


def encode_key(key: str) -> str:
    """``key`` as a valid KV key (an injective mapping; plain ids stay readable)."""
    if not key:
        raise ValueError("consensus keys must not be empty")
    return "".join(
        char
        if PLAIN_KEY_CHARACTERS.fullmatch(char)
        else "".join(f"_{byte:02X}" for byte in char.encode())
        for char in key
    )


class NatsKvConsensus(Consensus):
    """Linearizable CAS on the keys of a JetStream KV bucket."""

    # One client (connection + loop thread) per URI and process (see ``open_consensus``).
    shared = True

    def __init__(
        self, servers: str, bucket: str, *, replicas: int = 1, timeout: float = 10.0
    ) -> None:
        if not BUCKET.fullmatch(bucket):
            raise ValueError(
                f"NATS KV bucket {bucket!r} must be letters, digits, '-' and '_' "
                "(nats://host:port/bucket)"
            )
        self.servers = servers
        self.bucket = bucket
        self.uri = f"{servers}/{bucket}"
        self.timeout = timeout
        # key -> (seqno, revision) as last seen: a CAS right after a head (the
        # usual read-modify-write) needs no second read to learn the revision.
        self._revisions: dict[str, tuple[int, int]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"nats-kv-{bucket}", daemon=True
        )
        self._thread.start()
        try:
            self._connection, self._kv = self._run(self._open(replicas))
        except BaseException:
            self._stop_loop()
            raise
        self.max_value = self._connection.max_payload - MESSAGE_OVERHEAD - SEQNO.size

    @classmethod
    def from_uri(cls, uri: str) -> NatsKvConsensus:
        url = urlparse(uri)
        options = dict(parse_qsl(url.query))
        bucket = url.path.strip("/")
        if not bucket:
            raise ValueError(f"consensus URI {uri!r} names no bucket (nats://host:port/bucket)")
        return cls(
            f"nats://{url.netloc}",
            bucket,
            replicas=int(options.get("replicas", 1)),
            timeout=float(options.get("timeout", 10.0)),
        )

    async def _open(self, replicas: int) -> tuple[Any, Any]:
        try:
            connection = await nats.connect(
                self.servers,
                name=f"loupe-consensus-{self.bucket}",
                connect_timeout=min(self.timeout, 5),
                max_reconnect_attempts=-1,
                allow_reconnect=True,
            )
        except Exception as error:
            raise ConnectionError(f"consensus {self.uri}: cannot reach NATS: {error}") from error
        js = connection.jetstream(timeout=self.timeout)
        try:
            kv = await js.key_value(self.bucket)
        except nats.js.errors.BucketNotFoundError:
            config = nats.js.api.KeyValueConfig(
                bucket=self.bucket,
                history=1,
                replicas=replicas,
                storage=nats.js.api.StorageType.FILE,
                description="Loupe persist consensus (shard states)",
            )
            try:
                kv = await js.create_key_value(config)
            except nats.js.errors.APIError:
                # Created by another process meanwhile (with its own settings).
                kv = await js.key_value(self.bucket)
        return connection, kv

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(self.timeout + 1)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"consensus {self.uri}: no answer in {self.timeout}s") from None

    def head(self, key: str) -> tuple[int, bytes] | None:
        found = self._run(self._head(encode_key(key)))
        if found is None:
            self._revisions.pop(key, None)
            return None
        seqno, revision, value = found
        self._revisions[key] = (seqno, revision)
        return seqno, value

    async def _head(self, key: str) -> tuple[int, int, bytes] | None:
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        raw = entry.value or b""
        (seqno,) = SEQNO.unpack_from(raw)
        return seqno, entry.revision, raw[SEQNO.size :]

    def compare_and_set(self, key: str, expected: int | None, value: bytes) -> bool:
        if len(value) > self.max_value:
            raise ValueTooLarge(
                f"consensus {self.uri}: value of {key!r} is {len(value)} bytes, over the "
                f"{self.max_value} a NATS message holds here (server max_payload "
                f"{self._connection.max_payload}); compact the shard to fewer parts or raise "
                "max_payload"
            )
        seqno = 1 if expected is None else expected + 1
        known = self._revisions.get(key)
        last = known[1] if known is not None and known[0] == expected else None
        revision = self._run(self._compare_and_set(encode_key(key), expected, last, seqno, value))
        if revision is None:
            self._revisions.pop(key, None)
            return False
        self._revisions[key] = (seqno, revision)
        return True

    async def _compare_and_set(
        self, key: str, expected: int | None, last: int | None, seqno: int, value: bytes
    ) -> int | None:
        """The new revision, or None when the head is not at ``expected``."""
        payload = SEQNO.pack(seqno) + value
        try:
            if expected is None:
                return await self._kv.create(key, payload)
            if last is None:
                head = await self._head(key)
                if head is None or head[0] != expected:
                    return None
                last = head[1]
            return await self._kv.update(key, payload, last=last)
        except nats.js.errors.KeyWrongLastSequenceError:
            return None

    def close(self) -> None:
        forget_shared_consensus(self)
        if self._loop.is_closed():
            return
        try:
            self._run(self._connection.close())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
