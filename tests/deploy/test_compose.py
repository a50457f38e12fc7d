"""docker-compose.yml: Apache Kafka (KRaft) + the proxy + a one-shot client, checked as YAML.

No Docker engine here, so the file is parsed against the Compose Specification (the PyPI
package compose-spec) and checked for what `docker compose up` would need: the services and
their wiring, the KRaft settings a single apache/kafka node needs, the mounted proxy config
loaded with the proxy's own loader plus the service's environment and command line (parsed by
the proxy's own CLI parser), and a client bootstrap that matches the proxy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from compose_spec import PyCompose

from proxy import cli
from proxy.config import Config, ConfigError, load_config, parse_host_port
from testbed.kafka_install import KAFKA_LINES
from tests.deploy._dockerfile import read_stages

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    services = compose["services"]
    assert set(services) == {"kafka", "proxy", "example-client"}
    return services


def _proxy_config(proxy: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Config:
    """Load the proxy's configuration as the container would: file, environment, flags."""
    (mount,) = proxy["volumes"]
    source, target, *_ = mount.split(":")
    path = (ROOT / source).resolve()
    assert path.is_relative_to(ROOT / "deploy"), "mounted config files live under deploy/"
    args = cli._parser().parse_args(proxy["command"])
    assert args.command == "run"
    assert str(args.config) == target
    for name in list(os.environ):
        if name.startswith("PURGATORY_PROXY_"):
            monkeypatch.delenv(name)
    for name, value in proxy.get("environment", {}).items():
        monkeypatch.setenv(name, str(value))
    return load_config(path, cli._overrides(args))


def test_file_follows_the_compose_specification() -> None:
    # compose-spec binds the Rust compose_spec parser: unknown keys (a misspelt
    # "environment"), bad depends_on conditions and malformed ports are errors, as in
    # `docker compose config`.
    spec = PyCompose.from_yaml((ROOT / "docker-compose.yml").read_text()).to_spec()
    assert set(spec.services) == {"kafka", "proxy", "example-client"}


def test_kafka_is_a_single_kraft_node(services: dict[str, Any]) -> None:
    kafka = services["kafka"]
    # A version the suite tests the proxy against, not one nothing here runs.
    image, _, version = kafka["image"].partition(":")
    assert image == "apache/kafka" and version in KAFKA_LINES, kafka["image"]
    env = {k: str(v) for k, v in kafka["environment"].items()}
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node_id = env["KAFKA_NODE_ID"]
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert len(voters) == 1
    voter_id, _, voter_address = voters[0].partition("@")
    assert voter_id == node_id
    listeners = dict(
        (item.split("://")[0], item.split("://")[1]) for item in env["KAFKA_LISTENERS"].split(",")
    )
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert voter_address == f"kafka:{listeners[controller].rpartition(':')[2]}"
    assert set(env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].replace(":", ",").split(",")) >= set(
        listeners
    )
    # One broker: the internal topics cannot have the default replication factor of 3.
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert "healthcheck" in kafka


def test_proxy_config_loads_and_points_at_kafka(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = services["proxy"]
    config = _proxy_config(proxy, monkeypatch)
    kafka_env = services["kafka"]["environment"]
    advertised = dict(
        (item.split("://")[0], item.split("://")[1])
        for item in kafka_env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    )
    assert config.upstream.bootstrap == [advertised["PLAINTEXT"]]
    # Other containers reach the proxy by its service name, so that is what it must advertise.
    assert config.proxy.advertised_host == "proxy"
    assert parse_host_port(config.proxy.listen)[0] == "0.0.0.0"
    # Every broker gets a fixed port; the single node's id is the one Kafka runs with.
    assert set(config.proxy.broker_ports) == {int(kafka_env["KAFKA_NODE_ID"])}
    assert proxy["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_proxy_env_overrides_are_validated(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = dict(services["proxy"])
    proxy["environment"] = {**proxy["environment"], "PURGATORY_PROXY_LOG__LEVEL": "LOUD"}
    with pytest.raises(ConfigError, match=r"log\.level"):
        _proxy_config(proxy, monkeypatch)


def test_published_ports_cover_broker_and_metrics_listeners(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _proxy_config(services["proxy"], monkeypatch)
    published = {int(p.split(":")[0]): int(p.split(":")[1]) for p in services["proxy"]["ports"]}
    inside = set(published.values())
    assert parse_host_port(config.proxy.listen)[1] in inside
    assert parse_host_port(config.metrics.listen)[1] in inside
    for port in config.proxy.broker_ports.values():
        # Clients are told <advertised host>:<port>, so the published port must be the same.
        assert published.get(port) == port


def test_services_build_existing_dockerfile_stages(services: dict[str, Any]) -> None:
    stage_names = {stage.name for stage in read_stages(ROOT / "Dockerfile")[1]}
    for name in ("proxy", "example-client"):
        build = services[name]["build"]
        assert (ROOT / build["context"] / "Dockerfile").is_file()
        assert build["target"] in stage_names
    # The proxy must report healthy (Dockerfile HEALTHCHECK) before the client starts.
    assert services["example-client"]["depends_on"]["proxy"]["condition"] == "service_healthy"


def test_image_healthcheck_reaches_the_mounted_configs_metrics_port(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client waits for "healthy": the image probes HEALTHCHECK_URL, so the compose
    # config must serve /healthz where that URL points.
    runtime = read_stages(ROOT / "Dockerfile")[1][-1]
    url = next(
        word.partition("=")[2]
        for env in runtime.all("ENV")
        for word in env.split()
        if word.startswith("HEALTHCHECK_URL=")
    )
    config = _proxy_config(services["proxy"], monkeypatch)
    assert url.endswith(f":{parse_host_port(config.metrics.listen)[1]}/healthz")


def test_example_client_bootstraps_from_the_proxy(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = services["example-client"]
    command = client["command"]
    script = Path(command[0])
    # The examples stage copies examples/ to /examples.
    assert script.parts[1] == "examples"
    assert (ROOT / "examples" / Path(*script.parts[2:])).is_file()
    bootstrap = command[command.index("--bootstrap") + 1]
    config = _proxy_config(services["proxy"], monkeypatch)
    assert bootstrap == f"{config.proxy.advertised_host}:{parse_host_port(config.proxy.listen)[1]}"
