"""Loupe's local file system for Spark: Hadoop's, without a ``chmod`` process per file.

Without Hadoop's native library (PySpark ships none), Hadoop's local file
system sets the permission of every file it creates by forking ``chmod``:
two processes per part a Spark job writes (the data file and its ``.crc``
checksum file). A storage writer flush writes a part per builtin collection
it has updates for (15 to 35 under replica introspection), so those forks
were most of its time: a flush of 30 parts takes 0.4 of the time without
them (``bench/storage_writer.py``, "small flush").

``loupe.spark.LocalFileSystem`` (``java/``) is Hadoop's raw local file system
with ``setPermission`` done through ``java.nio``. It writes no checksum files
(Loupe reads parts with pyarrow, which never read them; Parquet carries its
own). Its jar is compiled once per machine with the JDK's ``javac`` into a
cache directory (``LOUPE_SPARK_JAR_DIR``, default ``~/.cache/loupe``) and
put on the driver's class path of a local-mode session. Where it cannot be
built (no ``javac``), the session uses Hadoop's own file system and says so
once (``spark_local_fs_unavailable``). ``LOUPE_SPARK_LOCAL_FS=hadoop`` chooses
Hadoop's on purpose (a cluster master always gets Hadoop's: its executors
would not have the jar).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from loupe.common.logging import get_logger

log = get_logger(__name__)

JAVA_ROOT = Path(__file__).with_name("java")
SOURCES = ("loupe/spark/LocalFileSystem.java",)
LOCAL_FS_CLASS = "loupe.spark.LocalFileSystem"
# The bytecode level: the oldest Java PySpark 4 runs on.
JAVA_RELEASE = "17"
COMPILE_TIMEOUT_S = 120.0


class JarUnavailable(RuntimeError):
    """The jar cannot be built here (no ``javac``, no Hadoop jar, a failed compile)."""


def jar_dir() -> Path:
    """Where built jars are kept (``LOUPE_SPARK_JAR_DIR``, else the user's cache)."""
    configured = os.environ.get("LOUPE_SPARK_JAR_DIR")
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "loupe"


def wanted() -> bool:
    """Whether sessions should use Loupe's local file system (``LOUPE_SPARK_LOCAL_FS``)."""
    choice = os.environ.get("LOUPE_SPARK_LOCAL_FS", "loupe").strip().lower()
    if choice not in ("loupe", "hadoop"):
        raise ValueError(f"LOUPE_SPARK_LOCAL_FS must be 'loupe' or 'hadoop', not {choice!r}")
    return choice == "loupe"


@functools.cache
def local_fs_jar() -> Path | None:
    """The jar of ``LOCAL_FS_CLASS``, built at the first call; None if it cannot be."""
    try:
        return build_jar(jar_dir())
    except JarUnavailable as error:
        log.warning("spark_local_fs_unavailable", reason=str(error))
        return None


def hadoop_api_jar() -> Path:
    """PySpark's Hadoop client API jar, which the class compiles against."""
    import pyspark

    found = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not found:
        raise JarUnavailable("PySpark ships no hadoop-client-api jar")
    return found[-1]


def javac() -> str:
    """The Java compiler: ``$JAVA_HOME/bin/javac``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    found = shutil.which("javac")
    if found is None:
        raise JarUnavailable("no javac (install a JDK, e.g. openjdk-17-jdk-headless)")
    return found


def build_jar(directory: Path, *, compiler: str | None = None) -> Path:
    """The jar in ``directory``, compiled first unless a jar of these sources is there.

    Named by a digest of the sources and the Hadoop jar, so a changed class or
    a new PySpark builds a new one; written under a temporary name and renamed,
    so processes building it at once never read a half-written jar.
    """
    hadoop = hadoop_api_jar()
    digest = hashlib.sha256(hadoop.name.encode())
    for source in SOURCES:
        digest.update((JAVA_ROOT / source).read_bytes())
    target = directory / f"loupe-spark-{digest.hexdigest()[:16]}.jar"
    if target.is_file():
        return target
    compiler = compiler or javac()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as work:
            classes = Path(work) / "classes"
            command = [
                compiler,
                "--release",
                JAVA_RELEASE,
                "-nowarn",
                "-classpath",
                str(hadoop),
                "-d",
                str(classes),
                *(str(JAVA_ROOT / source) for source in SOURCES),
            ]
            compiled = subprocess.run(
                command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False
            )
            if compiled.returncode != 0:
                output = (compiled.stderr or compiled.stdout).strip()
                raise JarUnavailable(f"javac failed ({compiled.returncode}): {output[:1000]}")
            staged = Path(work) / target.name
            with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as jar:
                jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
                for path in sorted(classes.rglob("*.class")):
                    jar.write(path, path.relative_to(classes).as_posix())
            os.replace(staged, target)
    except (OSError, subprocess.SubprocessError) as error:
        raise JarUnavailable(f"cannot build {target}: {error}") from error
    log.info("spark_local_fs_built", jar=str(target))
    return target
