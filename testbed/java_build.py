"""Compile one small Java source file with javac, once, into a cache outside the repo.

Why: the testbed and the benchmarks start a few tiny Java programs of their own (a JMX reader,
a launcher for a peer proxy). Compiling costs a second or two, so the classes are cached under
a key made of the source's contents and the classpath jars' names and sizes; a second run
starts the JVM straight away. An entry is compiled in a private folder and renamed into place,
so two processes compiling at once cannot leave a half-written one.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from testbed.kafka_install import cache_root

__all__ = ["compiled_classes"]

_JAVAC_TIMEOUT_S = 180


def compiled_classes(source: Path, classpath: Sequence[Path] = ()) -> Path:
    """The folder holding ``source``'s classes compiled against ``classpath``.

    ``classpath`` entries are jars or folders (a folder's ``*.jar`` are used).

    Raises:
        RuntimeError: javac is missing or the source does not compile (javac's output).
    """
    jars = _jars(classpath)
    digest = hashlib.sha256(source.read_bytes())
    for jar in jars:
        digest.update(jar.name.encode())
        digest.update(str(jar.stat().st_size).encode())
    cache = cache_root() / "java-classes"
    entry = cache / f"{source.stem}-{digest.hexdigest()[:16]}"
    if (entry / f"{source.stem}.class").exists():
        return entry
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac is not on PATH (a JDK 17 or newer is needed)")
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
    try:
        command = [javac, "-d", str(staging), str(source)]
        if jars:
            command[1:1] = ["-cp", ":".join(map(str, jars))]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=_JAVAC_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"javac {source.name} failed:\n{done.stdout}{done.stderr}")
        try:
            staging.rename(entry)
        except OSError:  # another process renamed its copy first
            if not (entry / f"{source.stem}.class").exists():
                raise
        return entry
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _jars(classpath: Sequence[Path]) -> list[Path]:
    jars: list[Path] = []
    for item in classpath:
        jars += sorted(item.glob("*.jar")) if item.is_dir() else [item]
    return jars
