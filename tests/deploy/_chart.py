# Strategy: the chart is rendered by Helm v4's own engine (helm-python-sdk embeds Helm's Go SDK as
# a shared library, so there is no helm binary and no cluster); the tests then read the rendered
# YAML as plain dicts. Shared by test_helm.py (shapes, schemas, the config) and test_probes.py
# (the rendered probes against a running proxy).
"""Render the Helm chart and pick objects out of the result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

__all__ = ["CHART", "kind", "pod_spec", "proxy_container", "render", "values_file"]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "purgatory-proxy"


def values_file(path: Path) -> dict[str, Any]:
    return helm.values_from_yaml(path.read_text())


def render(values: dict[str, Any] | None, chart: Path = CHART) -> list[dict[str, Any]]:
    """`helm template demo <chart> -n apps` with ``values``: every object, NOTES.txt left out."""
    with helm.Chart.load(chart) as loaded:
        manifests = loaded.render(values=values, name="demo", namespace="apps")
    objects = []
    for name, text in sorted(manifests.items()):
        if name.endswith(".yaml"):
            objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def kind(objects: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == name]


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = kind(objects, "Deployment")
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def proxy_container(pod: dict[str, Any]) -> dict[str, Any]:
    """The proxy, wherever the mode put it (containers, or initContainers as a native sidecar)."""
    found = [
        c
        for c in [*pod.get("initContainers", []), *pod["containers"]]
        if c["name"] == "purgatory-proxy"
    ]
    (proxy,) = found
    return proxy
