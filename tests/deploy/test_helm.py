"""The Helm chart, rendered and linted by a real Helm engine (Helm v4 via helm-python-sdk).

helm-python-sdk embeds Helm's Go SDK as a shared library, so `helm lint --strict` and
`helm template` run here without a helm binary or a cluster. The rendered manifests are then
checked against the Kubernetes object shapes the chart uses (Deployment, Service, ConfigMap,
ServiceMonitor): what the API server would reject (bad names, dangling port names, selectors
that select nothing) and what this chart promises (probes, securityContext, per-broker
ports), after the core objects passed Kubernetes' own OpenAPI schemas (kubernetes-validate,
strict: unknown fields fail too). The ConfigMap's TOML is loaded with the proxy's own loader.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from proxy.config import Config, load_config, parse_host_port

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "purgatory-proxy"
VALUE_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
CASES = [("defaults", None), *((p.stem, p) for p in VALUE_FILES)]

#: The Kubernetes API version the core objects are validated against (kubernetes-validate's
#: bundled OpenAPI schemas); the ServiceMonitor is a CRD with no schema there.
KUBE_VERSION = "1.30.0"

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _values(path: Path | None) -> dict[str, Any] | None:
    return None if path is None else helm.values_from_yaml(path.read_text())


def _render(values: dict[str, Any] | None) -> list[dict[str, Any]]:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values=values, name="demo", namespace="apps")
    objects = []
    for name, text in manifests.items():
        if name.endswith(".yaml"):
            objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def _kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _config(objects: list[dict[str, Any]], tmp_path: Path) -> Config:
    (configmap,) = _kind(objects, "ConfigMap")
    path = tmp_path / "config.toml"
    path.write_text(configmap["data"]["config.toml"])
    return load_config(path)


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("PURGATORY_PROXY_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(("case", "path"), CASES)
def test_lint_strict(case: str, path: Path | None) -> None:
    report = helm.lint(CHART, _values(path), strict=True)
    assert report["errors"] == []
    serious = [m for m in report["messages"] if m["severity"] >= 2]
    assert serious == []


def _check_metadata(obj: dict[str, Any]) -> None:
    assert obj["apiVersion"] and obj["kind"]
    name = obj["metadata"]["name"]
    assert DNS_LABEL.match(name) and len(name) <= 63, name
    for key, value in obj["metadata"].get("labels", {}).items():
        assert isinstance(value, str) and len(value) <= 63, (key, value)


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
    for probe in ("livenessProbe", "readinessProbe"):
        if probe in container:
            port = container[probe]["httpGet"]["port"]
            assert port in names or port in numbers, f"{probe} uses unknown port {port}"
    security = container.get("securityContext", {})
    if container["name"] == "purgatory-proxy":
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
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
    for container in pod["containers"]:
        _check_container(container)
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes
    return pod


def _proxy_container(pod: dict[str, Any]) -> dict[str, Any]:
    (proxy,) = [c for c in pod["containers"] if c["name"] == "purgatory-proxy"]
    return proxy


def _check_ports_match_config(proxy: dict[str, Any], config: Config) -> None:
    ports = {p["name"]: p["containerPort"] for p in proxy["ports"]}
    assert ports["bootstrap"] == parse_host_port(config.proxy.listen)[1]
    assert ports["metrics"] == parse_host_port(config.metrics.listen)[1]
    brokers = {int(n.removeprefix("broker-")): p for n, p in ports.items() if "broker-" in n}
    assert brokers == config.proxy.broker_ports
    assert config.proxy.broker_ports, "per-broker ports must be explicit"
    assert proxy["args"] == ["run", "--config", "/etc/purgatory-proxy/config.toml"]


def _check_services(
    objects: list[dict[str, Any]], pods: list[tuple[dict[str, Any], dict[str, str]]]
) -> None:
    for service in _kind(objects, "Service"):
        _check_metadata(service)
        selector = service["spec"]["selector"]
        selected = [pod for pod, labels in pods if selector.items() <= labels.items()]
        assert selected, f"Service {service['metadata']['name']} selects no pod"
        names = {
            port["name"]
            for pod in selected
            for c in pod["containers"]
            for port in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert PORT_NAME.match(port["name"]) and len(port["name"]) <= 15
            assert port["targetPort"] in names, port
    for monitor in _kind(objects, "ServiceMonitor"):
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        wanted = monitor["spec"]["selector"]["matchLabels"]
        targets = [
            s for s in _kind(objects, "Service")
            if wanted.items() <= s["metadata"]["labels"].items()
        ]  # fmt: skip
        assert targets, "the ServiceMonitor selects no Service"
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        assert all(endpoint["port"] in {p["name"] for p in s["spec"]["ports"]} for s in targets)


@pytest.mark.parametrize(("case", "path"), CASES)
def test_rendered_objects_have_valid_shapes(case: str, path: Path | None, tmp_path: Path) -> None:
    values = _values(path)
    objects = _render(values)
    for obj in objects:
        if obj["kind"] != "ServiceMonitor":
            # Raises ValidationError naming the field: unknown keys too (strict).
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    config = _config(objects, tmp_path)
    deployments = _kind(objects, "Deployment")
    assert len(deployments) == 1
    pods = []
    for deployment in deployments:
        pod = _check_deployment(deployment)
        _check_ports_match_config(_proxy_container(pod), config)
        pods.append((pod, deployment["spec"]["template"]["metadata"]["labels"]))
    _check_services(objects, pods)
    monitors = _kind(objects, "ServiceMonitor")
    wanted = bool((values or {}).get("metrics", {}).get("serviceMonitor", {}).get("enabled"))
    assert len(monitors) == int(wanted)


def test_gateway_mode_advertises_its_service(tmp_path: Path) -> None:
    values = _values(CHART / "ci" / "gateway-values.yaml")
    assert values is not None and values["mode"] == "gateway"
    objects = _render(values)
    config = _config(objects, tmp_path)
    (service,) = [s for s in _kind(objects, "Service")]
    assert config.proxy.advertised_host == f"{service['metadata']['name']}.apps.svc"
    assert parse_host_port(config.proxy.listen)[0] == "0.0.0.0"
    assert config.upstream.bootstrap == values["upstream"]["bootstrap"]
    # Clients are told <service>:<broker port>: the Service must expose each of them.
    exposed = {p["port"] for p in service["spec"]["ports"]}
    assert set(config.proxy.broker_ports.values()) <= exposed
    assert config.proxy.broker_ports == {1: 9093, 2: 9094, 3: 9095}


def test_sidecar_mode_puts_the_proxy_next_to_the_app(tmp_path: Path) -> None:
    values = _values(CHART / "ci" / "sidecar-values.yaml")
    objects = _render(values)
    config = _config(objects, tmp_path)
    (deployment,) = _kind(objects, "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["app", "purgatory-proxy"]
    # Only the app in the same pod reaches the Kafka ports; the probes reach metrics.
    assert config.proxy.listen == "127.0.0.1:9092"
    assert config.proxy.advertised_host == "127.0.0.1"
    assert parse_host_port(config.metrics.listen)[0] == "0.0.0.0"
    env = {e["name"]: e["value"] for e in containers[0]["env"]}
    assert env["KAFKA_BOOTSTRAP"] == config.proxy.listen
    assert config.memory.limit == 64 * 1024 * 1024
    # No Kafka-port Service in sidecar mode, only the metrics one for the ServiceMonitor.
    (service,) = _kind(objects, "Service")
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]


def test_broker_ports_from_values(tmp_path: Path) -> None:
    values = {"proxy": {"brokerPorts": {"1": None, "7": 19093, "8": 19094}}}
    objects = _render(values)
    config = _config(objects, tmp_path)
    assert config.proxy.broker_ports == {7: 19093, 8: 19094}
    (service,) = _kind(objects, "Service")
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports["broker-7"] == 19093 and ports["broker-8"] == 19094
    assert "broker-1" not in ports


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mode": "sidecars"}, "mode must be gateway or sidecar"),
        ({"upstream": {"bootstrap": []}}, "upstream.bootstrap is required"),
        ({"proxy": {"brokerPorts": {"2": 9093}}}, "port 9093 is already used"),
        ({"proxy": {"brokerPorts": {"1": 9464}}}, "already used by metrics.port"),
    ],
)
def test_bad_values_fail_to_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=message):
        _render(values)


def test_documented_sidecar_snippet(tmp_path: Path) -> None:
    """The pod-spec snippet in the chart's README: its config loads, its ports line up."""
    readme = (CHART / "README.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
    pod, configmap = yaml.safe_load_all(block)
    as_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"}, **pod}
    kubernetes_validate.validate(as_pod, KUBE_VERSION, strict=True)
    kubernetes_validate.validate(configmap, KUBE_VERSION, strict=True)
    path = tmp_path / "config.toml"
    path.write_text(configmap["data"]["config.toml"])
    config = load_config(path)
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    proxy = containers["purgatory-proxy"]
    _check_container(proxy)
    app_env = {e["name"]: e["value"] for e in containers["app"]["env"]}
    assert app_env["KAFKA_BOOTSTRAP"] == config.proxy.listen
    assert config.proxy.advertised_host == "127.0.0.1"
    (metrics,) = proxy["ports"]
    assert metrics["containerPort"] == parse_host_port(config.metrics.listen)[1]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    config_volume = next(
        m["name"] for m in proxy["volumeMounts"] if m["mountPath"] == "/etc/purgatory-proxy"
    )
    assert volumes[config_volume]["configMap"]["name"] == configmap["metadata"]["name"]
