"""testbed.java_release: the Java release a jar needs and the one a ``java -version`` names."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from testbed.java_release import class_file_release, parse_java_release


def _class_bytes(major: int) -> bytes:
    """The start of a class file compiled for class-file ``major`` (magic, minor, major)."""
    return b"\xca\xfe\xba\xbe" + (0).to_bytes(2, "big") + major.to_bytes(2, "big") + b"\x00" * 8


def _jar(path: Path, entries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize(
    ("printed", "release"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
        ('openjdk version "25.0.3" 2026-04-21 LTS', 25),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_392"\nJava(TM) SE Runtime Environment', 8),
        ('openjdk version "26-ea" 2026-03-17', 26),
        ('Picked up JAVA_TOOL_OPTIONS: -Xss1m\nopenjdk version "21.0.8" 2025-07-15 LTS', 21),
    ],
)
def test_parse_java_release_reads_the_feature_release(printed: str, release: int) -> None:
    assert parse_java_release(printed) == release


def test_parse_java_release_without_a_version_says_so() -> None:
    with pytest.raises(ValueError, match="no Java version"):
        parse_java_release("bash: java: command not found")


def test_class_file_release_reads_the_base_classes(tmp_path: Path) -> None:
    jar = _jar(
        tmp_path / "runtime.jar",
        {
            "META-INF/MANIFEST.MF": b"Manifest-Version: 1.0\n",
            # A multi-release jar's newer variant comes first here: it is not what the jar needs.
            "META-INF/versions/25/io/example/Fast.class": _class_bytes(69),
            "io/example/readme.txt": b"not a class",
            "io/example/Proxy.class": _class_bytes(65),
        },
    )
    assert class_file_release(jar) == 21


@pytest.mark.parametrize(("major", "release"), [(52, 8), (61, 17), (65, 21), (69, 25)])
def test_class_file_release_maps_major_versions(tmp_path: Path, major: int, release: int) -> None:
    jar = _jar(tmp_path / "one.jar", {"A.class": _class_bytes(major)})
    assert class_file_release(jar) == release


def test_class_file_release_of_a_jar_without_classes_says_so(tmp_path: Path) -> None:
    jar = _jar(tmp_path / "docs.jar", {"META-INF/MANIFEST.MF": b"Manifest-Version: 1.0\n"})
    with pytest.raises(ValueError, match="holds no class file"):
        class_file_release(jar)
