"""The Helm chart rendered by the real Helm (``helm template``, the pinned build of
``scripts/control-plane build``) with its default values or a test's: the objects a user's
``helm install`` creates. Helm missing skips on a developer's machine and fails under CI
(tests/tools.py)."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests import tools

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "gpuguard"
NAMESPACE = "gpuguard"
RELEASE = "gpuguard"
_SOURCE = re.compile(r"^# Source: gpuguard/templates/(\S+)$", re.M)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML has it


@functools.cache
def _templated(values_json: str) -> tuple[tuple[str, str], ...]:
    """(template file, document) for every document ``helm template`` prints."""
    helm = tools.require_built("helm")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values_file:
        values_file.write(values_json)  # JSON is YAML
        values_file.flush()
        done = subprocess.run(
            [helm, "template", RELEASE, str(CHART), f"--namespace={NAMESPACE}",
             f"--values={values_file.name}"],
            capture_output=True, text=True, check=False, timeout=120,
            env={"HELM_CACHE_HOME": tempfile.gettempdir() + "/gpuguard-helm-cache",
                 "HELM_CONFIG_HOME": tempfile.gettempdir() + "/gpuguard-helm-config",
                 "HELM_DATA_HOME": tempfile.gettempdir() + "/gpuguard-helm-data",
                 "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, f"helm template: {done.stderr.strip()[-2000:]}"
    documents = []
    for text in done.stdout.split("\n---\n"):
        source = _SOURCE.search(text)
        if source:
            documents.append((source[1], text))
    return tuple(documents)


@functools.cache
def _objects(values_json: str) -> tuple[tuple[str, str], ...]:
    """(template file, the object as JSON) for every object ``helm template`` prints: parsed
    once per values (by libyaml: the pure-Python parser took 0.4 s for the chart, a test at a
    time), kept as JSON so that each caller decodes objects of its own to change."""
    return tuple(
        (source, json.dumps(doc))
        for source, text in _templated(values_json)
        for doc in [yaml.load(text, Loader=_LOADER)]
        if doc
    )


def render(name: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The objects of one template; ``values`` default to the chart's values.yaml."""
    values = defaults() if values is None else values
    return [
        json.loads(text)
        for source, text in _objects(json.dumps(values, sort_keys=True))
        if source == name
    ]


def defaults() -> dict[str, Any]:
    """The chart's values.yaml, a copy of the caller's own to change."""
    values: dict[str, Any] = json.loads(_defaults_json())
    return values


@functools.cache
def _defaults_json() -> str:
    return json.dumps(yaml.load((CHART / "values.yaml").read_text(), Loader=_LOADER))


XID_OVERRIDES = "# ours\nclasses:\n  13: hardware\n  48: user\n"


def with_xid_overrides(text: str = XID_OVERRIDES) -> dict[str, Any]:
    """The default values with a cluster's Xid class override file (``xidOverrides``)."""
    values = defaults()
    values["xidOverrides"] = text
    return values


def with_gpu_reset(pools: tuple[str, ...] = ("NVIDIA-H100-80GB-HBM3",)) -> dict[str, Any]:
    """The default values with the GPU-reset route on for ``pools``
    (``controller.settings.remediation.gpu_reset_pools``: the reset Job is admitted)."""
    values = defaults()
    values["controller"]["settings"]["remediation"]["gpu_reset_pools"] = list(pools)
    return values


def all_objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object but the PrometheusRule (generated; tested in test_rules.py)."""
    return [
        obj
        for path in sorted((CHART / "templates").glob("*.yaml"))
        if path.name != "prometheusrule.yaml"
        for obj in render(path.name, values)
    ]


def by_kind(kind: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [o for o in all_objects(values) if o["kind"] == kind]


def by_name(kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in by_kind(kind) if o["metadata"]["name"] == name]
    return found
