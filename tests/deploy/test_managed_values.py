"""docs/deploy.md's pieces agree with each other: the sidecar in front of a TLS + SCRAM cluster
as plain manifests (examples/sidecar-tls-scram/pod.yaml and proxy.toml) and as chart values
(helm/purgatory-proxy/examples/sidecar-tls-scram-values.yaml) render the same proxy config,
probes, resources, volumes and security contexts; the managed-cluster values (MSK with SCRAM,
Confluent Cloud with an API key over PLAIN, Aiven with a client certificate or SCRAM) say
what each service needs. test_helm.py lints, renders and schema-checks every file in
helm/purgatory-proxy/examples/ like the ci/ ones; this file checks what they promise.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from proxy.config import Config, ConfigError, load_config
from proxy.security.sasl_client import MECHANISMS
from tests.deploy._chart import CHART, kind, pod_spec, proxy_container, render, values_file

ROOT = Path(__file__).resolve().parents[2]
SIDECAR = ROOT / "examples" / "sidecar-tls-scram"
EXAMPLES = CHART / "examples"
NATIVE_SIDECAR_KUBE = "1.29.0"


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PURGATORY_PROXY_"):
            monkeypatch.delenv(name)


def _rendered_config(objects: list[dict[str, Any]], tmp_path: Path) -> Config:
    (configmap,) = kind(objects, "ConfigMap")
    path = tmp_path / "config.toml"
    path.write_text(configmap["data"]["config.toml"])
    return load_config(path)


def _pod_yaml() -> dict[str, Any]:
    deployment: dict[str, Any] = yaml.safe_load((SIDECAR / "pod.yaml").read_text())
    return deployment


def _volume_by_mount(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """mountPath -> the volume's source, names aside (the two files name them differently)."""
    volumes = {v["name"]: {k: x for k, x in v.items() if k != "name"} for v in pod["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}


def test_pod_yaml_is_a_valid_native_sidecar_deployment() -> None:
    deployment = _pod_yaml()
    for version in (NATIVE_SIDECAR_KUBE, kubernetes_validate.latest_version()):
        kubernetes_validate.validate(deployment, version, strict=True)
    pod = deployment["spec"]["template"]["spec"]
    proxy = proxy_container(pod)
    assert proxy["restartPolicy"] == "Always"
    # Your registry's image, not a name that only exists on the machine that built it.
    assert "/" in proxy["image"].partition(":")[0]


def test_pod_yaml_matches_what_the_chart_renders(tmp_path: Path) -> None:
    """Probes, resources, security contexts, volumes, args and the config are the same."""
    chart_pod = pod_spec(render(values_file(EXAMPLES / "sidecar-tls-scram-values.yaml")))
    chart_proxy = proxy_container(chart_pod)
    pod = _pod_yaml()["spec"]["template"]["spec"]
    proxy = proxy_container(pod)
    for field in (
        "startupProbe", "livenessProbe", "readinessProbe", "resources", "securityContext",
        "args", "restartPolicy",
    ):  # fmt: skip
        assert proxy[field] == chart_proxy[field], field
    assert pod["securityContext"] == chart_pod["securityContext"]
    assert pod["terminationGracePeriodSeconds"] == chart_pod["terminationGracePeriodSeconds"]
    assert pod["automountServiceAccountToken"] is chart_pod["automountServiceAccountToken"]
    ours, theirs = _volume_by_mount(pod, proxy), _volume_by_mount(chart_pod, chart_proxy)
    assert ours.keys() == theirs.keys()
    assert ours["/tmp"] == theirs["/tmp"]  # readOnlyRootFilesystem: the one writable path
    secret = "/etc/kafka-credentials"
    assert ours[secret]["secret"]["secretName"] == theirs[secret]["secret"]["secretName"]
    assert "configMap" in ours["/etc/purgatory-proxy"]
    assert [p["containerPort"] for p in proxy["ports"] if p["name"] == "metrics"] == [
        p["containerPort"] for p in chart_proxy["ports"] if p["name"] == "metrics"
    ]
    # proxy.toml, as pod.yaml mounts it, is the config the chart writes into its ConfigMap.
    assert load_config(SIDECAR / "proxy.toml") == _rendered_config(
        render(values_file(EXAMPLES / "sidecar-tls-scram-values.yaml")), tmp_path
    )


def test_chart_readme_snippet_probes_are_the_charts() -> None:
    """The pod-spec snippet in the chart's README probes as the chart does."""
    readme = (CHART / "README.md").read_text()
    (block,) = [b for b in readme.split("```yaml\n")[1:] if "initContainers" in b]
    pod, _ = yaml.safe_load_all(block.split("```")[0])
    (snippet,) = pod["spec"]["initContainers"]
    chart = proxy_container(pod_spec(render({"mode": "sidecar"})))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert snippet[probe]["httpGet"] == chart[probe]["httpGet"], probe


def _managed(name: str, tmp_path: Path) -> tuple[dict[str, Any], Config, dict[str, Any]]:
    """(values, the proxy's config as rendered, the proxy container) of an examples/ file."""
    values = values_file(EXAMPLES / name)
    objects = render(values)
    return values, _rendered_config(objects, tmp_path), pod_spec(objects)


def _files_on_the_secret(config: Config, pod: dict[str, Any], *paths: str) -> None:
    proxy = proxy_container(pod)
    mounted = {m["mountPath"]: m["name"] for m in proxy["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for path in paths:
        directory = str(Path(path).parent)
        assert directory in mounted, path
        assert "secret" in volumes[mounted[directory]], path


def test_msk_with_scram(tmp_path: Path) -> None:
    _, config, pod = _managed("msk-scram-values.yaml", tmp_path)
    upstream = config.upstream
    assert all(address.endswith(":9096") for address in upstream.bootstrap)  # SASL/SCRAM port
    assert upstream.tls.enabled and upstream.tls.ca_file == ""  # Amazon's public CA
    assert upstream.sasl.mechanism == "SCRAM-SHA-512"  # the only SCRAM MSK offers
    _files_on_the_secret(config, pod, upstream.sasl.password_file)


def test_msk_iam_is_not_a_mechanism_of_the_proxy(tmp_path: Path) -> None:
    """What docs/deploy.md says plainly: MSK's IAM access control cannot be used."""
    assert "AWS_MSK_IAM" not in MECHANISMS
    path = tmp_path / "iam.toml"
    path.write_text('[upstream.sasl]\nmechanism = "AWS_MSK_IAM"\n')
    with pytest.raises(ConfigError, match="mechanism"):
        load_config(path)


def test_confluent_cloud_with_an_api_key(tmp_path: Path) -> None:
    values, config, pod = _managed("confluent-cloud-values.yaml", tmp_path)
    upstream = config.upstream
    assert upstream.tls.enabled and upstream.tls.ca_file == ""
    assert upstream.sasl.mechanism == "PLAIN"
    assert upstream.sasl.username and upstream.sasl.password.get_secret_value() == ""
    _files_on_the_secret(config, pod, upstream.sasl.password_file)
    # A sidecar: brokers beyond the listed ones get a free loopback port.
    assert values["mode"] == "sidecar" and config.proxy.listen.startswith("127.0.0.1:")
    assert 0 in config.proxy.broker_ports  # Confluent Cloud numbers its brokers from b0


def test_aiven_with_a_client_certificate(tmp_path: Path) -> None:
    _, config, pod = _managed("aiven-mtls-values.yaml", tmp_path)
    tls = config.upstream.tls
    assert tls.enabled and tls.check_hostname
    assert config.upstream.sasl.mechanism == ""
    _files_on_the_secret(config, pod, tls.ca_file, tls.cert_file, tls.key_file)


def test_aiven_with_scram(tmp_path: Path) -> None:
    _, config, pod = _managed("aiven-scram-values.yaml", tmp_path)
    upstream = config.upstream
    assert upstream.tls.enabled and upstream.tls.ca_file  # Aiven's project CA
    assert upstream.sasl.mechanism in {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    _files_on_the_secret(config, pod, upstream.tls.ca_file, upstream.sasl.password_file)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*-values.yaml")), ids=lambda p: p.name)
def test_examples_use_your_registry_and_no_secret_in_the_configmap(path: Path) -> None:
    values = values_file(path)
    assert "/" in values["image"]["repository"], "the image comes from your registry"
    objects = render(values)
    (configmap,) = kind(objects, "ConfigMap")
    sasl = tomllib.loads(configmap["data"]["config.toml"])["upstream"]["sasl"]
    assert "password" not in sasl
    if values["mode"] == "sidecar":
        (app,) = [c for c in pod_spec(objects)["containers"] if c["name"] == "app"]
        assert not app["image"].startswith("purgatory-proxy-examples"), "your app, not ours"
