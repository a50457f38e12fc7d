"""Which Java release a jar's classes need, and which release a ``java`` binary is.

Why: a peer built from source may need a newer Java than the one on PATH (Kroxylicious 0.22
and later need 21; this machine's default is 17). Starting it on too old a JVM fails with an
UnsupportedClassVersionError buried in a start-up log; comparing the two numbers first lets the
caller say plainly which Java to give instead.
"""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

__all__ = ["class_file_release", "java_version_line", "parse_java_release"]

_CLASS_MAGIC = b"\xca\xfe\xba\xbe"
#: A class file's major version minus this is its Java release (Java 8 is major 52).
_MAJOR_OFFSET = 44
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?[^"]*"')


def class_file_release(jar: Path) -> int:
    """The Java release the classes of ``jar`` were compiled for (the first class read).

    Multi-release jars keep newer variants under META-INF/versions/: those are skipped, the
    base classes are what the jar needs at least.

    Raises:
        ValueError: the jar holds no class file.
    """
    with zipfile.ZipFile(jar) as archive:
        for name in archive.namelist():
            if name.endswith(".class") and not name.startswith("META-INF/"):
                with archive.open(name) as stream:
                    header = stream.read(8)
                if header[:4] == _CLASS_MAGIC:
                    return int.from_bytes(header[6:8], "big") - _MAJOR_OFFSET
    raise ValueError(f"{jar} holds no class file")


def parse_java_release(text: str) -> int:
    """The feature release named by ``java -version``'s output ("1.8.0_392" is 8).

    Raises:
        ValueError: no version string in ``text``.
    """
    found = _VERSION.search(text)
    if found is None:
        raise ValueError(f"no Java version in {text[:200]!r}")
    first, second = int(found.group(1)), found.group(2)
    return int(second) if first == 1 and second is not None else first


def java_version_line(java: Path) -> str:
    """The first line ``java -version`` prints (it writes to stderr).

    Raises:
        ValueError: it failed or printed nothing.
        OSError: ``java`` cannot be executed.
    """
    done = subprocess.run(
        [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
    )
    lines = (done.stderr + done.stdout).strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ValueError(f"`{java} -version` failed: {(done.stderr or done.stdout)[:200]}")
    return lines[0]
