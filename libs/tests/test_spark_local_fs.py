"""Loupe's local file system for Spark: built with javac, used by local sessions, correct."""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path
from typing import Any

import pytest

from loupe.common import spark_local_fs
from loupe.common.spark_local_fs import LOCAL_FS_CLASS, JarUnavailable, build_jar


def _has_javac() -> bool:
    try:
        spark_local_fs.javac()
    except JarUnavailable:
        return False
    return True


needs_javac = pytest.mark.skipif(
    not _has_javac(), reason="no javac: Spark uses Hadoop's local file system here"
)


@needs_javac
def test_the_jar_is_built_once_and_named_by_its_sources(tmp_path: Path) -> None:
    jar = build_jar(tmp_path)
    with zipfile.ZipFile(jar) as archive:
        assert "loupe/spark/LocalFileSystem.class" in archive.namelist()
    built = jar.stat().st_mtime_ns
    assert build_jar(tmp_path) == jar
    assert jar.stat().st_mtime_ns == built, "built again"
    assert [p.name for p in tmp_path.iterdir()] == [jar.name], "no build leftovers"


def test_without_a_working_javac_the_jar_is_unavailable_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(JarUnavailable, match="no javac"):
        build_jar(tmp_path / "jars")
    broken = tmp_path / "javac"
    broken.write_text("#!/bin/sh\necho 'javac: broken' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(JarUnavailable, match="javac failed \\(3\\): javac: broken"):
        build_jar(tmp_path / "jars", compiler=str(broken))


def test_the_choice_of_file_system_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOUPE_SPARK_LOCAL_FS", "hadoop")
    assert not spark_local_fs.wanted()
    monkeypatch.setenv("LOUPE_SPARK_LOCAL_FS", "Loupe ")
    assert spark_local_fs.wanted()
    monkeypatch.setenv("LOUPE_SPARK_LOCAL_FS", "posix")
    with pytest.raises(ValueError, match="'loupe' or 'hadoop'"):
        spark_local_fs.wanted()


@needs_javac
@pytest.mark.spark
def test_a_local_session_writes_through_it_with_the_permissions_asked(
    spark: Any, tmp_path: Path
) -> None:
    """The session's file:// is Loupe's class; it sets modes exactly (no chmod process)
    and a partitioned write leaves its parts readable, with no checksum files."""
    jvm = spark.sparkContext._jvm
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    assert hadoop.get("fs.file.impl") == LOCAL_FS_CLASS
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), hadoop)
    assert fs.getClass().getName() == LOCAL_FS_CLASS
    target = tmp_path / "file"
    target.write_text("x")
    for mode in (0o640, 0o751, 0o600):
        permission = jvm.org.apache.hadoop.fs.permission.FsPermission(mode)
        fs.setPermission(jvm.org.apache.hadoop.fs.Path(str(target)), permission)
        assert stat.S_IMODE(target.stat().st_mode) == mode

    output = tmp_path / "parts"
    frame = spark.createDataFrame([(1, "a"), (2, "b")], "v long, mz_shard string")
    frame.coalesce(1).write.partitionBy("mz_shard").parquet(str(output))
    written = [p for p in output.rglob("*") if p.is_file()]
    assert {p.parent.name for p in written if p.suffix == ".parquet"} == {
        "mz_shard=a",
        "mz_shard=b",
    }
    assert not [p for p in written if p.name.endswith(".crc")]
    umask = os.umask(0)
    os.umask(umask)
    for part in written:
        assert stat.S_IMODE(part.stat().st_mode) == 0o666 & ~umask
