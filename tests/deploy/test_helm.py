"""The Helm chart, rendered and linted by a real Helm engine (Helm v4 via helm-python-sdk).

helm-python-sdk embeds Helm's Go SDK as a shared library, so `helm lint --strict` and
`helm template` run here without a helm binary or a cluster. Every mode is rendered (gateway,
native sidecar, classic sidecar; each with and without the request log and the metrics
endpoint) and checked against Kubernetes' own OpenAPI schemas (kubernetes-validate, strict:
unknown fields fail too) for the versions the mode claims to support, then against what this
chart promises (probes, securityContext, per-broker ports, startup order, disruption budget,
spread, the request-log volume's size). The ConfigMap's TOML is parsed and loaded with the
proxy's own loader, and compared key by key with the proxy's configuration model, so the chart
and the config cannot drift apart.
"""

from __future__ import annotations

import math
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel, ByteSize, TypeAdapter

from proxy.config import Config, load_config, parse_host_port
from tests.deploy._chart import CHART, kind, pod_spec, proxy_container, render, values_file

#: chart-testing's ci/ files and the deployment examples (managed clusters, docs/deploy.md).
VALUE_FILES = sorted((CHART / "ci").glob("*-values.yaml")) + sorted(
    (CHART / "examples").glob("*-values.yaml")
)

#: Kubernetes versions whose OpenAPI schemas (bundled in kubernetes-validate) each form must pass:
#: the native sidecar from 1.29 (SidecarContainers on by default), the rest from the oldest
#: schemas kubernetes-validate ships; and the newest it ships for all.
OLDEST_KUBE = "1.25.0"
NATIVE_SIDECAR_KUBE = "1.29.0"
LATEST_KUBE = kubernetes_validate.latest_version()

MODES: dict[str, dict[str, Any]] = {
    "gateway": {"mode": "gateway"},
    "sidecar-native": {"mode": "sidecar"},
    "sidecar-classic": {"mode": "sidecar", "sidecar": {"native": False}},
}

#: Every mode with and without the request log and the metrics endpoint, plus the ci/ files and
#: the chart's defaults: what `helm lint --strict` and `helm template` must accept.
MATRIX: list[tuple[str, dict[str, Any] | None]] = [
    ("defaults", None),
    *((f"{p.parent.name}/{p.name}", values_file(p)) for p in VALUE_FILES),
    *(
        (
            f"{mode}-requestlog-{'on' if log else 'off'}-metrics-{'on' if metrics else 'off'}",
            {**base, "requestLog": {"enabled": log}, "metrics": {"enabled": metrics}},
        )
        for mode, base in MODES.items()
        for log in (False, True)
        for metrics in (False, True)
    ),
]
MATRIX_IDS = [case for case, _ in MATRIX]

#: Keys of the proxy's config the chart does not render, and why.
NOT_RENDERED = {
    # Gateway mode needs every broker port in the Service, so the chart lists them explicitly
    # ([proxy.broker_ports], which wins); config.proxy.first_broker_port passes through if set.
    ("proxy", "first_broker_port"),
    # A secret never goes into a ConfigMap: the chart refuses it (password_file, or the
    # environment variable from a Secret, instead).
    ("upstream", "sasl", "password"),
}

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MIB = 1024 * 1024


def _merged(values: dict[str, Any] | None) -> dict[str, Any]:
    """What the templates see: the chart's defaults coalesced with ``values``."""
    with helm.Chart.load(CHART) as chart:
        return chart.merge_values(values)


def _toml(objects: list[dict[str, Any]]) -> str:
    (configmap,) = kind(objects, "ConfigMap")
    text: str = configmap["data"]["config.toml"]
    return text


def _config(objects: list[dict[str, Any]], tmp_path: Path) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(_toml(objects))
    return load_config(path)


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("PURGATORY_PROXY_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(("case", "values"), MATRIX, ids=MATRIX_IDS)
def test_lint_strict(case: str, values: dict[str, Any] | None) -> None:
    report = helm.lint(CHART, values, strict=True)
    assert report["errors"] == []
    serious = [m for m in report["messages"] if m["severity"] >= 2]
    assert serious == []


def _check_metadata(obj: dict[str, Any]) -> None:
    assert obj["apiVersion"] and obj["kind"]
    name = obj["metadata"]["name"]
    assert DNS_LABEL.match(name) and len(name) <= 63, name
    for key, value in obj["metadata"].get("labels", {}).items():
        assert isinstance(value, str) and len(value) <= 63, (key, value)


def _check_probe(container: dict[str, Any], probe: str, names: set[str], numbers: set[int]) -> None:
    handler = container[probe]
    if "httpGet" in handler:
        port = handler["httpGet"]["port"]
        assert port in names or port in numbers, f"{probe} uses unknown port {port}"
    else:
        command = handler["exec"]["command"]
        assert command[:2] == ["python", "-c"], command
        compile(command[2], f"<{probe}>", "exec")


def _check_container(container: dict[str, Any]) -> None:
    assert DNS_LABEL.match(container["name"])
    assert isinstance(container["image"], str) and container["image"]
    names = set()
    numbers = set()
    for port in container.get("ports", []):
        assert PORT_NAME.match(port["name"]) and len(port["name"]) <= 15, port
        assert isinstance(port["containerPort"], int) and 1 <= port["containerPort"] <= 65535
        assert port.get("protocol", "TCP") == "TCP"
        names.add(port["name"])
        numbers.add(port["containerPort"])
    assert len(names) == len(container.get("ports", [])) == len(numbers), "duplicate ports"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe in container:
            _check_probe(container, probe, names, numbers)
    security = container.get("securityContext", {})
    if container["name"] == "purgatory-proxy":
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert probe in container, probe
        assert container["resources"]["requests"] and container["resources"]["limits"]
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]


def _check_deployment(deployment: dict[str, Any]) -> dict[str, Any]:
    _check_metadata(deployment)
    assert deployment["apiVersion"] == "apps/v1"
    spec = deployment["spec"]
    template = spec["template"]
    selector = spec["selector"]["matchLabels"]
    labels = template["metadata"]["labels"]
    assert selector and selector.items() <= labels.items(), "selector must match the pod labels"
    pod = template["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    volumes = {v["name"] for v in pod["volumes"]}
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        _check_container(container)
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes
    return pod


def _check_ports_match_config(proxy: dict[str, Any], config: Config) -> None:
    ports = {p["name"]: p["containerPort"] for p in proxy["ports"]}
    assert ports["bootstrap"] == parse_host_port(config.proxy.listen)[1]
    if config.metrics.listen:
        assert ports["metrics"] == parse_host_port(config.metrics.listen)[1]
    else:
        assert "metrics" not in ports
    brokers = {int(n.removeprefix("broker-")): p for n, p in ports.items() if "broker-" in n}
    assert brokers == config.proxy.broker_ports
    # Per-broker ports are explicit, or SNI mode serves every broker on the one port.
    assert bool(config.proxy.broker_ports) != config.proxy.sni.enabled
    assert proxy["args"] == ["run", "--config", "/etc/purgatory-proxy/config.toml"]


def _check_services(
    objects: list[dict[str, Any]], pods: list[tuple[dict[str, Any], dict[str, str]]]
) -> None:
    for service in kind(objects, "Service"):
        _check_metadata(service)
        selector = service["spec"]["selector"]
        selected = [pod for pod, labels in pods if selector.items() <= labels.items()]
        assert selected, f"Service {service['metadata']['name']} selects no pod"
        names = {
            port["name"]
            for pod in selected
            for c in [*pod.get("initContainers", []), *pod["containers"]]
            for port in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert PORT_NAME.match(port["name"]) and len(port["name"]) <= 15
            assert port["targetPort"] in names, port
    for monitor in kind(objects, "ServiceMonitor"):
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        wanted = monitor["spec"]["selector"]["matchLabels"]
        targets = [
            s for s in kind(objects, "Service")
            if wanted.items() <= s["metadata"]["labels"].items()
        ]  # fmt: skip
        assert targets, "the ServiceMonitor selects no Service"
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        assert all(endpoint["port"] in {p["name"] for p in s["spec"]["ports"]} for s in targets)


def _kube_versions(merged: dict[str, Any]) -> list[str]:
    native = merged["mode"] == "sidecar" and merged["sidecar"]["native"]
    return [NATIVE_SIDECAR_KUBE if native else OLDEST_KUBE, LATEST_KUBE]


def _expected_size_limit(max_bytes: object, backups: int) -> str:
    """The request-log volume's sizeLimit, computed here from the proxy's own size parser."""
    files = int(TypeAdapter(ByteSize).validate_python(max_bytes)) * (backups + 1)
    total = files + max(files // 10, 16 * MIB)
    return f"{math.ceil(total / MIB)}Mi"


def _check_mode(merged: dict[str, Any], objects: list[dict[str, Any]], config: Config) -> None:
    """The pod is the one the values ask for: where the proxy runs, its probes, its volumes."""
    pod = pod_spec(objects)
    proxy = proxy_container(pod)
    metrics = merged["metrics"]["enabled"]
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        if metrics:
            assert proxy[probe]["httpGet"] == {"path": path, "port": "metrics"}
        else:
            assert "httpGet" not in proxy[probe]
            assert (
                str(parse_host_port(config.proxy.listen)[1]) in proxy[probe]["exec"]["command"][2]
            )
        timing = merged[probe]
        assert timing.items() <= proxy[probe].items()
    assert bool(config.metrics.listen) == metrics
    if merged["mode"] == "gateway":
        assert [c["name"] for c in pod["containers"]] == ["purgatory-proxy"]
        assert "initContainers" not in pod
        assert len(kind(objects, "PodDisruptionBudget")) == 1
    elif merged["sidecar"]["native"]:
        # Started (and probed) before the app, stopped after it.
        (init,) = pod["initContainers"]
        assert init is proxy and init["restartPolicy"] == "Always"
        assert [c["name"] for c in pod["containers"]] == ["app"]
    else:
        assert "initContainers" not in pod
        assert [c["name"] for c in pod["containers"]] == ["app", "purgatory-proxy"]
        assert "restartPolicy" not in proxy
    if merged["mode"] == "sidecar":
        assert kind(objects, "PodDisruptionBudget") == []
        assert "topologySpreadConstraints" not in pod
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in proxy["volumeMounts"]}
    if merged["requestLog"]["enabled"]:
        log = merged["config"]["log"]
        assert Path(config.log.requests).parent == Path(mounts["request-log"])
        size_limit = volumes["request-log"]["emptyDir"]["sizeLimit"]
        assert size_limit == _expected_size_limit(
            log["requests_max_bytes"], log["requests_backups"]
        )
        assert config.log.requests_max_bytes == TypeAdapter(ByteSize).validate_python(
            log["requests_max_bytes"]
        )
    else:
        assert config.log.requests == ""
        assert "request-log" not in volumes and "request-log" not in mounts


@pytest.mark.parametrize(("case", "values"), MATRIX, ids=MATRIX_IDS)
def test_rendered_objects_validate(
    case: str, values: dict[str, Any] | None, tmp_path: Path
) -> None:
    merged = _merged(values)
    objects = render(values)
    for version in _kube_versions(merged):
        for obj in objects:
            if obj["kind"] != "ServiceMonitor":
                # Raises ValidationError naming the field: unknown keys too (strict).
                kubernetes_validate.validate(obj, version, strict=True)
    config = _config(objects, tmp_path)
    deployments = kind(objects, "Deployment")
    assert len(deployments) == 1
    pods = []
    for deployment in deployments:
        pod = _check_deployment(deployment)
        _check_ports_match_config(proxy_container(pod), config)
        pods.append((pod, deployment["spec"]["template"]["metadata"]["labels"]))
    _check_services(objects, pods)
    monitors = kind(objects, "ServiceMonitor")
    assert len(monitors) == int(bool(merged["metrics"]["serviceMonitor"]["enabled"]))
    _check_mode(merged, objects, config)


def _model_keys(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    keys: set[tuple[str, ...]] = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= _model_keys(annotation, (*prefix, name))
        else:
            keys.add((*prefix, name))
    return keys


#: Settings whose value is a table of the user's own keys, not a section of settings.
_TABLE_SETTINGS = {("proxy", "broker_ports"), ("connections", "max_connections_per_ip_overrides")}


def _toml_keys(table: dict[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    keys: set[tuple[str, ...]] = set()
    for name, value in table.items():
        if isinstance(value, dict) and (*prefix, name) not in _TABLE_SETTINGS:
            keys |= _toml_keys(value, (*prefix, name))
        else:
            keys.add((*prefix, name))
    return keys


@pytest.mark.parametrize(("case", "values"), MATRIX, ids=MATRIX_IDS)
def test_configmap_renders_every_key_of_the_proxy_config(
    case: str, values: dict[str, Any] | None
) -> None:
    """Every section and key of proxy/config/'s model is in the TOML, and nothing else.

    A key added to the proxy fails here until it is one line in values.yaml's `config` map.
    """
    rendered = tomllib.loads(_toml(render(values)))
    assert set(rendered) == set(Config.model_fields)
    missing = _model_keys(Config) - _toml_keys(rendered) - NOT_RENDERED
    assert not missing, f"add these to helm/purgatory-proxy/values.yaml `config`: {missing}"
    unknown = _toml_keys(rendered) - _model_keys(Config)
    assert not unknown, f"keys the proxy does not have: {unknown}"


def _expected_config(merged: dict[str, Any], derived: dict[str, dict[str, Any]]) -> Config:
    sections = {s: dict(t or {}) for s, t in merged["config"].items()}
    for section, keys in derived.items():
        sections.setdefault(section, {}).update(keys)
    return Config.model_validate(sections)


def _flat(tree: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    flat: dict[tuple[str, ...], Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= _flat(value, (*prefix, key))
        else:
            flat[(*prefix, key)] = value
    return flat


def _field(config: BaseModel, key: tuple[str, ...]) -> Any:
    value: Any = config
    for part in key:
        value = value.get(part) if isinstance(value, dict) else getattr(value, part)
    return value


#: A value other than the default for every key values.yaml's `config` carries.
OVERRIDES: dict[str, dict[str, Any]] = {
    "proxy": {
        "first_broker_port": 19100,
        "client_auth": "passthrough",
        "tls": {
            "cert_file": "/etc/purgatory-proxy/tls/tls.crt",
            "key_file": "/etc/purgatory-proxy/tls/tls.key",
            "client_ca_file": "/etc/purgatory-proxy/tls/ca.crt",
            "crl_file": "/etc/purgatory-proxy/tls/ca.crl",
        },
    },
    "upstream": {
        "bootstrap": ["kafka-a:19092", "kafka-b:19092"],
        "connect_timeout_ms": 1234,
        "metadata_refresh_ms": 4321,
        "tls": {
            "enabled": True,
            "ca_file": "/etc/kafka-tls/ca.crt",
            "cert_file": "/etc/kafka-tls/tls.crt",
            "key_file": "/etc/kafka-tls/tls.key",
            "check_hostname": False,
        },
        "sasl": {
            "mechanism": "SCRAM-SHA-512",
            "username": "proxy",
            "password_file": "/etc/kafka-sasl/password",
            "token_file": "/etc/kafka-sasl/token",
        },
    },
    "memory": {
        "limit": "1GiB",
        "socket_request_max_bytes": "1MB",
        "unauthenticated_request_max_bytes": "256KiB",
        "tight_fraction": 0.25,
    },
    "connections": {
        "idle_timeout_ms": 1111,
        "frame_timeout_ms": 2222,
        "shutdown_drain_ms": 3333,
        "upstream_idle_timeout_ms": 4444,
        "upstream_answer_grace_ms": 4545,
        "max_connections": 5555,
        "max_connections_per_ip": 66,
        "max_connections_per_ip_overrides": {"10.0.0.5": 500, "2001:db8::7": 0},
        "max_connection_creation_rate": 77,
        "max_connection_creation_rate_per_ip": 8,
        "reserved_descriptors": 99,
        "send_timeout_ms": 12_000,
        "authentication_timeout_ms": 13_000,
    },
    "purgatory": {"tick_ms": 2, "wheel_size": 64, "purge_interval": 77},
    "fetch": {
        "hold": False,
        "watcher_max_wait_ms": 250,
        "busy_window_ms": 0,
        "offset_watch_interval_ms": 40,
        "immediate_max_wait_ms": 50,
        "session_cache_size": 0,
        "response_max_bytes": 1048576,
    },
    "log": {
        "level": "DEBUG",
        "format": "json",
        "requests_max_bytes": "10MiB",
        "requests_backups": 2,
        "requests_queue_lines": 99,
    },
}


@pytest.mark.parametrize("mode", MODES)
def test_values_reach_the_proxy_config(mode: str, tmp_path: Path) -> None:
    """Defaults and non-default values both arrive in the proxy's config, each key as given."""
    for config_values in (None, OVERRIDES):
        values = {**MODES[mode], "requestLog": {"enabled": True}}
        if config_values is not None:
            values["config"] = config_values
        merged = _merged(values)
        objects = render(values)
        config = _config(objects, tmp_path)
        gateway = mode == "gateway"
        listen_host = "0.0.0.0" if gateway else "127.0.0.1"
        derived = {
            "proxy": {
                "listen": f"{listen_host}:9092",
                "advertised_host": "demo-purgatory-proxy.apps.svc" if gateway else "127.0.0.1",
                "broker_ports": {1: 9093},
            },
            "metrics": {"listen": "0.0.0.0:9464"},
            "log": {"requests": "/var/log/purgatory-proxy/requests.jsonl"},
        }
        assert config == _expected_config(merged, derived)
    defaults = Config()
    overridden = _flat(OVERRIDES)
    for key in overridden:
        assert _field(config, key) != _field(defaults, key), key
    # Every key values.yaml carries is exercised with a non-default value above, but SNI
    # mode's, which excludes per-broker ports: test_gateway_on_one_port_routes_by_server_name.
    sni = {k for k in _flat(_merged(None)["config"]) if k[:2] == ("proxy", "sni")}
    assert _flat(_merged(None)["config"]).keys() - sni <= overridden.keys()


def test_yaml_numbers_render_as_toml_integers_and_floats() -> None:
    """Helm hands YAML numbers to templates as float64: whole ones must come out as integers."""
    values = values_file(CHART / "values.yaml")
    rendered = tomllib.loads(_toml(render(values)))
    assert rendered["upstream"]["connect_timeout_ms"] == 10000
    assert isinstance(rendered["upstream"]["connect_timeout_ms"], int)
    assert rendered["memory"]["tight_fraction"] == 0.1
    assert rendered["proxy"]["broker_ports"] == {"1": 9093}
    assert rendered["fetch"]["hold"] is True


def test_gateway_mode_advertises_its_service(tmp_path: Path) -> None:
    values = values_file(CHART / "ci" / "gateway-values.yaml")
    assert values["mode"] == "gateway"
    objects = render(values)
    config = _config(objects, tmp_path)
    (service,) = kind(objects, "Service")
    assert config.proxy.advertised_host == f"{service['metadata']['name']}.apps.svc"
    assert parse_host_port(config.proxy.listen)[0] == "0.0.0.0"
    assert config.upstream.bootstrap == values["config"]["upstream"]["bootstrap"]
    # Clients are told <service>:<broker port>: the Service must expose each of them.
    exposed = {p["port"] for p in service["spec"]["ports"]}
    assert set(config.proxy.broker_ports.values()) <= exposed
    assert config.proxy.broker_ports == {1: 9093, 2: 9094, 3: 9095}
    # The SASL password file and the CA come from a Secret mounted where the config says.
    proxy = proxy_container(pod_spec(objects))
    mounts = {m["name"]: m["mountPath"] for m in proxy["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    assert volumes["kafka-credentials"]["secret"]["secretName"] == "kafka-proxy-credentials"
    credentials = Path(mounts["kafka-credentials"])
    assert Path(config.upstream.sasl.password_file).parent == credentials
    assert Path(config.upstream.tls.ca_file).parent == credentials
    assert "password" not in tomllib.loads(_toml(objects))["upstream"]["sasl"]


def test_gateway_on_one_port_routes_by_server_name(tmp_path: Path) -> None:
    values = values_file(CHART / "ci" / "gateway-sni-values.yaml")
    objects = render(values)
    config = _config(objects, tmp_path)
    assert config.proxy.sni.enabled and config.proxy.tls.enabled
    sni = values["config"]["proxy"]["sni"]
    assert (config.proxy.sni.bootstrap_host, config.proxy.sni.broker_host) == (
        sni["bootstrap_host"],
        sni["broker_host"],
    )
    assert config.proxy.broker_ports == {}  # the chart's default {1: 9093} is not rendered
    (service,) = kind(objects, "Service")
    assert [p["name"] for p in service["spec"]["ports"]] == ["bootstrap", "metrics"]
    ports = proxy_container(pod_spec(objects))["ports"]
    assert [p["name"] for p in ports] == ["bootstrap", "metrics"]


def test_one_port_without_tls_fails_to_render() -> None:
    values = values_file(CHART / "ci" / "gateway-sni-values.yaml")
    del values["config"]["proxy"]["tls"]
    with pytest.raises(Exception, match=r"config\.proxy\.sni routes by the server name"):
        render(values)


def test_gateway_disruption_budget_and_spread() -> None:
    objects = render(None)
    (deployment,) = kind(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    (pdb,) = kind(objects, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    constraints = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in constraints] == [
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    ]
    for constraint in constraints:
        # Counts this release's proxies only, and never blocks scheduling on a small cluster.
        assert constraint["labelSelector"]["matchLabels"].items() <= pod_labels.items()
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
    # The other budget form, and switching both off.
    objects = render(
        {
            "podDisruptionBudget": {"maxUnavailable": None, "minAvailable": "50%"},
            "topologySpreadConstraints": [],
        }
    )
    (pdb,) = kind(objects, "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": "50%", "selector": pdb["spec"]["selector"]}
    assert "topologySpreadConstraints" not in pod_spec(objects)
    objects = render({"podDisruptionBudget": {"enabled": False}})
    assert kind(objects, "PodDisruptionBudget") == []


def test_sidecar_mode_puts_the_proxy_next_to_the_app(tmp_path: Path) -> None:
    for path in ("sidecar-values.yaml", "sidecar-classic-values.yaml"):
        values = values_file(CHART / "ci" / path)
        objects = render(values)
        config = _config(objects, tmp_path)
        pod = pod_spec(objects)
        (app,) = [c for c in pod["containers"] if c["name"] == "app"]
        # Only the app in the same pod reaches the Kafka ports; the probes reach metrics.
        assert config.proxy.listen == "127.0.0.1:9092"
        assert config.proxy.advertised_host == "127.0.0.1"
        env = {e["name"]: e["value"] for e in app["env"]}
        assert env["KAFKA_BOOTSTRAP"] == config.proxy.listen
        assert config.memory.limit == 64 * MIB
    # Native (ci/sidecar-values.yaml): no Kafka-port Service, only the metrics one.
    objects = render(values_file(CHART / "ci" / "sidecar-values.yaml"))
    (service,) = kind(objects, "Service")
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]
    assert proxy_container(pod_spec(objects))["restartPolicy"] == "Always"
    # Classic with metrics off: nothing is reachable from outside the pod.
    objects = render(values_file(CHART / "ci" / "sidecar-classic-values.yaml"))
    assert kind(objects, "Service") == []
    volume = {v["name"]: v for v in pod_spec(objects)["volumes"]}["request-log"]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "40Mi"}  # 3 x 8 MiB + 16


def test_broker_ports_from_values(tmp_path: Path) -> None:
    values = {"proxy": {"brokerPorts": {"1": None, "7": 19093, "8": 19094}}}
    objects = render(values)
    config = _config(objects, tmp_path)
    assert config.proxy.broker_ports == {7: 19093, 8: 19094}
    (service,) = kind(objects, "Service")
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports["broker-7"] == 19093 and ports["broker-8"] == 19094
    assert "broker-1" not in ports


@pytest.mark.parametrize(
    ("max_bytes", "backups"),
    [("100MiB", 5), ("1GB", 2), ("512KiB", 0), (1048576, 3), ("1.5 GiB", 1), ("10mb", 9)],
)
def test_request_log_volume_is_sized_from_rotation(max_bytes: object, backups: int) -> None:
    values = {
        "requestLog": {"enabled": True},
        "config": {"log": {"requests_max_bytes": max_bytes, "requests_backups": backups}},
    }
    volumes = {v["name"]: v for v in pod_spec(render(values))["volumes"]}
    assert volumes["request-log"]["emptyDir"]["sizeLimit"] == _expected_size_limit(
        max_bytes, backups
    )


def test_request_log_size_limit_override() -> None:
    values = {
        "requestLog": {"enabled": True, "sizeLimit": "3Gi"},
        "config": {"log": {"requests_max_bytes": 0}},
    }
    volumes = {v["name"]: v for v in pod_spec(render(values))["volumes"]}
    assert volumes["request-log"]["emptyDir"] == {"sizeLimit": "3Gi"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mode": "sidecars"}, "mode must be gateway or sidecar"),
        ({"config": {"upstream": {"bootstrap": []}}}, "config.upstream.bootstrap is required"),
        ({"proxy": {"brokerPorts": {"2": 9093}}}, "port 9093 is already used"),
        ({"proxy": {"brokerPorts": {"1": 9464}}}, "already used by metrics.port"),
        ({"config": {"proxy": {"listen": "0.0.0.0:1"}}}, r"config.proxy.listen is set by the"),
        ({"config": {"metrics": {"listen": ""}}}, r"config.metrics.listen is set by the"),
        ({"config": {"log": {"requests": "/x"}}}, r"config.log.requests is set by the chart"),
        ({"config": {"fetch": 3}}, "config.fetch must be a map"),
        (
            {"config": {"upstream": {"sasl": {"password": "hunter2"}}}},
            "config.upstream.sasl.password would put a secret into a ConfigMap",
        ),
        ({"config": {"fetch": {"hold": {"a": [{"b": 1}]}}}}, "cannot write a map"),
        (
            {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}},
            "needs metrics.enabled",
        ),
        (
            {"podDisruptionBudget": {"minAvailable": 1}},
            "exactly one of maxUnavailable and minAvailable",
        ),
        (
            {"requestLog": {"enabled": True}, "config": {"log": {"requests_max_bytes": 0}}},
            "set requestLog.sizeLimit",
        ),
        (
            {"requestLog": {"enabled": True}, "config": {"log": {"requests_max_bytes": "8bits"}}},
            'config.log.requests_max_bytes: cannot read "8bits"',
        ),
    ],
)
def test_bad_values_fail_to_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=message):
        render(values)


def _render_validate_on(tmp_path: Path, kube_version: str, values: dict[str, Any]) -> None:
    """Render the chart's validate helper as if the cluster were ``kube_version``.

    helm-python-sdk's offline render has no --kube-version (its Capabilities say v1.36) and
    `helm lint` ignores `fail`, so a copy of the chart gets one extra template that calls the
    real helper with that version in .Capabilities.
    """
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "kube-version-probe.yaml").write_text(
        '{{- $capabilities := dict "KubeVersion" (dict "Version" "' + kube_version + '") }}\n'
        '{{- include "purgatory-proxy.validate" (dict "Values" .Values "Capabilities"'
        " $capabilities) }}\n"
    )
    render(values, chart)


@pytest.mark.parametrize(
    ("kube", "values", "refused"),
    [
        ("v1.28.9", {"mode": "sidecar"}, True),
        ("v1.29.0", {"mode": "sidecar"}, False),
        ("v1.25.3-gke.100", {"mode": "sidecar", "sidecar": {"native": False}}, False),
        ("v1.25.3-gke.100", {"mode": "gateway"}, False),
    ],
)
def test_native_sidecar_refused_below_kubernetes_129(
    kube: str, values: dict[str, Any], refused: bool, tmp_path: Path
) -> None:
    if refused:
        with pytest.raises(helm.HelmRenderError, match=r"sidecar.native needs Kubernetes >= 1.29"):
            _render_validate_on(tmp_path, kube, values)
    else:
        _render_validate_on(tmp_path, kube, values)


def test_native_sidecar_needs_the_129_schema() -> None:
    """Why the chart refuses: before 1.28 the API has no restartPolicy on init containers."""
    native = render({"mode": "sidecar"})
    (deployment,) = kind(native, "Deployment")
    with pytest.raises(kubernetes_validate.ValidationError, match="restartPolicy"):
        kubernetes_validate.validate(deployment, "1.27.0", strict=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run_probe(command: list[str]) -> int:
    assert command[0] == "python"
    return subprocess.run(
        [sys.executable, *command[1:]], capture_output=True, timeout=30, check=False
    ).returncode


@pytest.mark.parametrize("mode", MODES)
def test_exec_probe_without_metrics_checks_the_bootstrap_port(mode: str) -> None:
    """metrics.enabled=false: the probes connect to the bootstrap port from inside the pod."""
    port = _free_port()
    values = {**MODES[mode], "metrics": {"enabled": False}, "proxy": {"port": port}}
    proxy = proxy_container(pod_spec(render(values)))
    commands = [proxy[p]["exec"]["command"] for p in ("startupProbe", "livenessProbe")]
    assert _run_probe(commands[0]) != 0  # nothing listens yet
    with socket.create_server(("127.0.0.1", port)):
        assert all(_run_probe(c) == 0 for c in commands)


def test_documented_sidecar_snippet(tmp_path: Path) -> None:
    """The pod-spec snippet in the chart's README: native sidecar form, config loads, ports."""
    readme = (CHART / "README.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
    pod, configmap = yaml.safe_load_all(block)
    as_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"}, **pod}
    for version in (NATIVE_SIDECAR_KUBE, LATEST_KUBE):
        kubernetes_validate.validate(as_pod, version, strict=True)
        kubernetes_validate.validate(configmap, version, strict=True)
    path = tmp_path / "config.toml"
    path.write_text(configmap["data"]["config.toml"])
    config = load_config(path)
    (proxy,) = pod["spec"]["initContainers"]
    assert proxy["name"] == "purgatory-proxy" and proxy["restartPolicy"] == "Always"
    _check_container(proxy)
    assert proxy["startupProbe"]["httpGet"]["path"] == "/healthz"
    (app,) = pod["spec"]["containers"]
    app_env = {e["name"]: e["value"] for e in app["env"]}
    assert app_env["KAFKA_BOOTSTRAP"] == config.proxy.listen
    assert config.proxy.advertised_host == "127.0.0.1"
    (metrics,) = proxy["ports"]
    assert metrics["containerPort"] == parse_host_port(config.metrics.listen)[1]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    config_volume = next(
        m["name"] for m in proxy["volumeMounts"] if m["mountPath"] == "/etc/purgatory-proxy"
    )
    assert volumes[config_volume]["configMap"]["name"] == configmap["metadata"]["name"]
