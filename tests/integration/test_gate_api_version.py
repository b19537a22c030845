"""The onboarding gate compares the kubelet with the API server's own version.

It reads ``GET /version`` over the connection lightkube uses; ``--api-server-version``
overrides it, and the control-plane kubelet stands in only when ``/version`` cannot be read.
The report (JSON output and annotation) says which source it used.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import lightkube
import pytest
import typer
from typer.testing import CliRunner

from gpuguard import errors
from gpuguard.cli import gate as gate_cli
from gpuguard.model import annotation_keys
from gpuguard.sim import kube_objects, kubeapi, state
from gpuguard.sources import kubernetes
from tests.conftest import SimApi

pytestmark = pytest.mark.integration

PLANE_KUBELET = "v1.34.3+rke2r1"
NEWER = "v1.35.0+rke2r1"
ONBOARDING = {"key": annotation_keys.ONBOARDING_TAINT, "value": "pending", "effect": "NoSchedule"}
NEW = "gpu-node-new"


def add_node(api: SimApi, name: str, index: int, kubelet: str, *, plane: bool = False) -> None:
    node = state.SimNode(
        name=name,
        boot_id=f"boot-{name}",
        driver_module="580.126.09",
        driver_library="580.126.09",
        kubelet_version=kubelet,
    )
    now = datetime.now(UTC)
    obj = kube_objects.node_object(node, now, index)
    obj["status"] = {**obj["status"], **kube_objects.node_status(node, now, now)}
    if plane:
        labels = obj["metadata"]["labels"]
        del labels["node-role.kubernetes.io/worker"]
        labels["node-role.kubernetes.io/control-plane"] = "true"
    obj["spec"] = {**obj["spec"], "taints": [] if plane else [ONBOARDING]}
    api.store.create("Node", "", obj)


def run_gate(api: SimApi, *flags: str) -> dict[str, Any]:
    app = typer.Typer()
    app.command()(gate_cli.gate)
    args = [NEW, "--kube-server", api.url, "--dry-run", "-o", "json", *flags]
    outcome = CliRunner().invoke(app, args)
    assert outcome.exit_code in (1, 2), outcome.output  # no agent, no burn-in: never passes
    report: dict[str, Any] = json.loads(outcome.stdout)
    return report


@dataclass(frozen=True)
class Case:
    served: str  # what GET /version answers
    kubelet: str  # the new node's
    expected_version: str | None
    expected_source: str  # the start of the report's api_server.source
    expected_status: str  # of the kubelet-version step
    flag: str | None = None  # --api-server-version
    forbidden: bool = False  # GET /version answers 403 (no RBAC for /version)
    control_plane: bool = True  # a control-plane node whose kubelet is PLANE_KUBELET


ENDPOINT = "API server /version"
CASES = [
    pytest.param(
        Case(NEWER, NEWER, NEWER, ENDPOINT, "PASS"),
        id="control-plane-upgraded-first-version-endpoint-not-old-kubelet",
    ),
    pytest.param(
        Case(PLANE_KUBELET, "v1.35.7+rke2r1", PLANE_KUBELET, ENDPOINT, "FAIL"),
        id="aug7-kubelet-1.35-against-1.34-api-server",
    ),
    pytest.param(
        Case(PLANE_KUBELET, NEWER, NEWER, "--api-server-version", "PASS", flag=NEWER),
        id="flag-overrides-version-endpoint",
    ),
    pytest.param(
        Case(
            NEWER,
            NEWER,
            PLANE_KUBELET,
            "control-plane cp-1 kubelet; GET /version answered 403",
            "FAIL",
            forbidden=True,
        ),
        id="version-forbidden-falls-back-to-control-plane-kubelet",
    ),
    pytest.param(
        Case(
            NEWER,
            NEWER,
            None,
            "no control-plane node to fall back to; GET /version answered 403",
            "UNKNOWN",
            forbidden=True,
            control_plane=False,
        ),
        id="no-version-no-control-plane-keeps-taint",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_gate_takes_the_api_server_version_from_flag_then_version_then_control_plane(
    sim_api: SimApi, case: Case
) -> None:
    sim_api.server.version = case.served
    if case.control_plane:
        add_node(sim_api, "cp-1", 0, PLANE_KUBELET, plane=True)
    add_node(sim_api, NEW, 1, case.kubelet)
    if case.forbidden:
        sim_api.server.fail_next("GET", "/version", 403, "Forbidden")

    report = run_gate(sim_api, *(("--api-server-version", case.flag) if case.flag else ()))

    source = report["api_server"]["source"]
    assert report["api_server"]["version"] == case.expected_version
    assert source.startswith(case.expected_source)
    [step] = [s for s in report["steps"] if s["step"] == "kubelet-version"]
    assert step["status"] == case.expected_status
    assert source in step["evidence"]
    asked = [r.path for r in sim_api.server.requests if r.path == "/version"]
    assert asked == ([] if case.flag else ["/version"])


def test_reader_returns_the_served_git_version_over_lightkubes_connection(
    sim_api: SimApi,
) -> None:
    sim_api.server.version = NEWER
    with lightkube.Client(config=sim_api.config()) as client:
        assert kubernetes.api_server_version(client) == NEWER
    assert [(r.method, r.path) for r in sim_api.server.requests] == [("GET", "/version")]


def test_reader_on_an_unreachable_api_server_is_a_source_error_naming_version() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = kubeapi.lightkube_config(f"http://127.0.0.1:{port}")
    with lightkube.Client(config=config) as client, pytest.raises(errors.SourceError) as caught:
        kubernetes.api_server_version(client, timeout_s=2.0)
    assert "GET /version failed" in str(caught.value)
