"""Which Kroxylicious bench.peers starts, and the configuration it gives it.

bench.peers runs 0.12.0 from Maven Central unless it is given the unpacked binary distribution
of a later release (--kroxylicious-dist DIR or $KROXYLICIOUS_DIST). This checks what it makes
of such a folder, through ``python -m bench.peers.kroxylicious`` (tests never import bench:
tests/unit/test_layout.py), which prints its decision and the configuration without starting
anything: the release read off the runtime jar's name, the Java release its classes need
against the java that would run it (a newer one is asked for by name), and
network.proxy.workerThreadCount set from 0.17.0 on, one per core. The folders are laid out as
the release's assembly lays them out; running a real build is the peers smoke test's part.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from testbed.java_release import java_version_line, parse_java_release

ROOT = Path(__file__).resolve().parents[2]
#: `make test` installs a JDK (scripts/install-system-deps.sh): Kafka needs one too.
JAVA = shutil.which("java")


def _path_java() -> tuple[str, int]:
    assert JAVA is not None, "java is not on PATH"
    line = java_version_line(Path(JAVA))
    return line, parse_java_release(line)


def _distribution(root: Path, version: str, needs_java: int) -> Path:
    """A folder laid out as kroxylicious-app's binary distribution, its runtime jar compiled
    (by its class header) for ``needs_java``."""
    dist = root / f"kroxylicious-app-{version}"
    (dist / "bin").mkdir(parents=True)
    (dist / "libs").mkdir()
    start = dist / "bin" / "kroxylicious-start.sh"
    start.write_text("#!/bin/sh\nexit 1\n")
    start.chmod(0o755)
    header = b"\xca\xfe\xba\xbe\x00\x00" + (needs_java + 44).to_bytes(2, "big")
    with zipfile.ZipFile(dist / "libs" / f"kroxylicious-runtime-{version}.jar", "w") as jar:
        jar.writestr("io/kroxylicious/proxy/KafkaProxy.class", header + b"\x00" * 8)
    (dist / "libs" / "kroxylicious-api-9.9.9.jar").write_bytes(b"")
    return dist


def _decide(*args: str | Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """What `python -m bench.peers.kroxylicious ARGS` prints, parsed."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KROXYLICIOUS_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.peers.kroxylicious", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    decided: dict[str, Any] = json.loads(done.stdout)
    return decided


def test_without_a_distribution_it_is_0_12_0_from_maven_central() -> None:
    decided = _decide()
    assert decided["kroxylicious"] == "0.12.0 (kroxylicious-runtime from Maven Central)"
    assert decided["missing"] is None
    # 0.12.0 has no worker-thread setting: nothing beyond the virtual cluster is configured.
    assert set(decided["config"]) == {"virtualClusters"}
    (cluster,) = decided["config"]["virtualClusters"]
    assert cluster["targetCluster"] == {"bootstrapServers": "127.0.0.1:9092"}
    (gateway,) = cluster["gateways"]
    assert gateway["portIdentifiesNode"] == {
        "bootstrapAddress": "127.0.0.1:9192",
        "nodeIdRanges": [{"name": "nodes", "start": 0, "end": 0}],
    }


def test_a_distribution_is_named_by_its_release_and_runs_with_a_thread_per_core(
    tmp_path: Path,
) -> None:
    line, release = _path_java()
    dist = _distribution(tmp_path, "0.23.0", needs_java=release)
    decided = _decide("--kroxylicious-dist", dist)
    assert decided["missing"] is None
    assert decided["version"] == "0.23.0"
    assert decided["kroxylicious"] == (
        f"0.23.0 (its distribution's kroxylicious-start.sh, --kroxylicious-dist {dist}; "
        f"{line}; network.proxy.workerThreadCount {len(os.sched_getaffinity(0))})"
    )
    assert decided["config"]["network"] == {
        "proxy": {"workerThreadCount": len(os.sched_getaffinity(0))}
    }


def test_the_environment_gives_the_distribution_and_the_jdk(tmp_path: Path) -> None:
    assert JAVA is not None
    line, release = _path_java()
    dist = _distribution(tmp_path, "0.23.0", needs_java=release)
    jdk = Path(JAVA).resolve().parents[1]
    decided = _decide(env={"KROXYLICIOUS_DIST": str(dist), "KROXYLICIOUS_JAVA_HOME": str(jdk)})
    assert decided["missing"] is None
    assert f"KROXYLICIOUS_DIST {dist}; {line};" in decided["kroxylicious"]


def test_a_release_before_worker_threads_gets_no_network_settings(tmp_path: Path) -> None:
    _, release = _path_java()
    dist = _distribution(tmp_path, "0.16.0", needs_java=release)
    decided = _decide("--kroxylicious-dist", dist)
    assert decided["missing"] is None and decided["version"] == "0.16.0"
    assert "network" not in decided["config"]
    assert "workerThreadCount" not in decided["kroxylicious"]


def test_too_old_a_java_leaves_kroxylicious_out_and_says_which_to_give(tmp_path: Path) -> None:
    assert JAVA is not None
    _, release = _path_java()
    dist = _distribution(tmp_path, "0.23.0", needs_java=release + 1)
    decided = _decide("--kroxylicious-dist", dist)
    assert decided["missing"] == (
        f"Kroxylicious 0.23.0 needs Java {release + 1} or newer and {JAVA} is Java {release}: "
        "give --kroxylicious-java-home DIR or $KROXYLICIOUS_JAVA_HOME"
    )
    assert decided["kroxylicious"] == f"not measured: {decided['missing']}"


@pytest.mark.parametrize(
    ("layout", "why"),
    [
        ("empty", "{dist} has no executable bin/kroxylicious-start.sh"),
        ("no runtime jar", "{dist}/libs holds 0 kroxylicious-runtime jars, not one"),
    ],
)
def test_a_folder_that_is_no_distribution_is_reported(
    tmp_path: Path, layout: str, why: str
) -> None:
    if layout == "empty":
        dist = tmp_path / "kroxylicious-app-0.23.0"
        dist.mkdir()
    else:
        dist = _distribution(tmp_path, "0.23.0", needs_java=17)
        (dist / "libs" / "kroxylicious-runtime-0.23.0.jar").unlink()
    decided = _decide("--kroxylicious-dist", dist)
    assert decided["missing"] == f"--kroxylicious-dist {dist}: " + why.format(dist=dist)
    assert decided["kroxylicious"] == f"not measured: {decided['missing']}"
