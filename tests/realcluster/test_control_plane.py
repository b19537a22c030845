"""The real control plane starts from the pinned build, its controllers do their work, and
gpuguard's chart passes `helm lint` and installs into it with every object admitted."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from gpuguard.sim.control_plane import cluster, versions
from tests import chart, waits
from tests.realcluster import helm, nodes


def test_it_serves_the_pinned_release(real_plane: cluster.ControlPlane) -> None:
    version = json.loads(real_plane.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"].startswith(versions.KUBERNETES)
    assert real_plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    # The DRA device-taint API gpuguard's DeviceTaintRules use is served.
    resources = real_plane.kubectl("api-resources", "--api-group=resource.k8s.io", "-o", "name")
    assert "devicetaintrules.resource.k8s.io" in resources.stdout.split()


def test_the_real_job_controller_decides_at_the_deadline_and_fails_the_job_once_its_pod_ends(
    real_plane: cluster.ControlPlane,
) -> None:
    """What the simulator's Job controller models (sim/kubelet.py): at the deadline the Job
    gets FailureTarget and its pod a deletionTimestamp; with no kubelet to end the pod it stays
    Terminating and the Job gets no Failed; once the pod is gone (here force-deleted, as a
    kubelet confirms a kill) the Job fails and the TTL controller deletes it."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "deadline", "namespace": "default"},
        "spec": {
            "activeDeadlineSeconds": 2,
            "ttlSecondsAfterFinished": 2,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": "nowhere",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            },
        },
    }
    real_plane.kubectl("create", "-f", "-", stdin=json.dumps(job))

    def conditions() -> list[str]:
        got = real_plane.kubectl("get", "job", "deadline", "-o", "json", check=False)
        found = json.loads(got.stdout or "{}").get("status", {}).get("conditions", [])
        return [f"{c['type']}/{c['reason']}" for c in found if c["status"] == "True"]

    assert waits.eventually(lambda: bool(conditions()), timeout_s=60, every_s=0.5)
    assert conditions() == ["FailureTarget/DeadlineExceeded"]
    pods = json.loads(real_plane.kubectl("get", "pods", "-o", "json").stdout)["items"]
    assert [bool(p["metadata"].get("deletionTimestamp")) for p in pods] == [True]
    time.sleep(3)  # no kubelet ends the pod: the Job stays decided but not Failed
    assert conditions() == ["FailureTarget/DeadlineExceeded"]

    real_plane.kubectl("delete", "pods", "--all", "--grace-period=0", "--force")
    assert waits.eventually(
        lambda: "Failed/DeadlineExceeded" in conditions(), timeout_s=60, every_s=0.5
    ), conditions()

    def deleted() -> bool:
        return real_plane.kubectl("get", "job", "deadline", check=False).returncode != 0

    assert waits.eventually(deleted, timeout_s=60, every_s=0.5), "the TTL controller kept it"


def test_helm_lint_passes_and_template_matches_what_the_tests_render(bin_dir: Path) -> None:
    lint = helm.run(bin_dir, "lint", "--strict", str(helm.CHART))
    assert "0 chart(s) failed" in lint
    # The tests read the chart through `helm template` (tests/chart.py): every template of
    # the chart but the opt-in ones renders with the defaults.
    rendered = {o["metadata"]["name"] for o in chart.all_objects()}
    assert {"gpuguard-jobs", "gpuguard-node-marks", "gpuguard"} <= rendered


def test_the_chart_installs_and_every_object_is_stored(installed: cluster.ControlPlane) -> None:
    for obj in chart.all_objects():
        kind = obj["kind"].lower()
        namespace = obj["metadata"].get("namespace")
        args = ["get", kind, obj["metadata"]["name"], "-o", "name"]
        if namespace:
            args.append(f"--namespace={namespace}")
        assert installed.kubectl(*args).stdout.strip(), obj["metadata"]["name"]
    # The API server type-checked every policy's CEL against each kind it matches (the
    # controller-manager's policy status controller); the only warnings left are named here.
    policies = json.loads(
        installed.kubectl("get", "validatingadmissionpolicies", "-o", "json").stdout
    )["items"]
    warned = {
        (p["metadata"]["name"], kind)
        for p in policies
        for w in (p.get("status", {}).get("typeChecking") or {}).get("expressionWarnings", [])
        for kind in re.findall(r"Kind=(\w+): ERROR", w["warning"])
    }
    assert warned <= KNOWN_TYPE_WARNINGS, warned - KNOWN_TYPE_WARNINGS


# (policy, kind): why the type checker's warning is not a defect.
KNOWN_TYPE_WARNINGS = {
    # One rule reads Job fields (backoffLimit, parallelism, ...) behind `!variables.isJob ||`;
    # the checker also types it against the Pods the policy matches, where they do not exist.
    ("gpuguard-jobs", "Pod"),
    ("gpuguard-change-jobs", "Pod"),
    # status.capacity/allocatable are maps of resource.Quantity, which the checker's Node type
    # leaves out; at run time they compare as values (the admission replay proves the agent's
    # own condition writes are admitted and a change to them refused).
    ("gpuguard-node-conditions", "Node"),
}


def test_a_default_install_admits_its_own_agent_and_controller_pods(
    installed: cluster.ControlPlane,
) -> None:
    """The DaemonSet controller creates an agent pod for each GPU node and the ReplicaSet
    controller the controller's pods, through every admission policy of the chart (before the
    chart created its change-templates parameter, the change-jobs binding refused them all)."""
    with nodes.registered(installed, ["gpu-node-a", "gpu-node-b"]):

        def pods(label: str) -> list[dict[str, Any]]:
            listed = installed.kubectl(
                "get", "pods", "-n", helm.NAMESPACE, "-l", label, "-o", "json"
            )
            items: list[dict[str, Any]] = json.loads(listed.stdout)["items"]
            return items

        agent = "app.kubernetes.io/component=agent"
        controller = "app.kubernetes.io/component=controller"
        assert waits.eventually(lambda: len(pods(agent)) == 2, timeout_s=60, every_s=0.5), (
            _refusals(installed)
        )
        assert waits.eventually(lambda: len(pods(controller)) >= 1, timeout_s=60, every_s=0.5), (
            _refusals(installed)
        )
        assert sorted(p["spec"]["nodeName"] for p in pods(agent)) == ["gpu-node-a", "gpu-node-b"]


def _refusals(plane: cluster.ControlPlane) -> str:
    events = plane.kubectl(
        "get", "events", "-n", helm.NAMESPACE, "--field-selector=reason=FailedCreate", "-o", "json"
    )
    return "; ".join(e["message"] for e in json.loads(events.stdout)["items"][-3:])


def test_a_start_whose_picked_port_was_taken_meanwhile_is_made_again_on_fresh_ports(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``free_port`` can only say a port was free: here etcd's first pick is bound by the time
    etcd starts, as an outgoing connection's source port or a plane beside it can bind it."""
    real_free_port = cluster.free_port
    picked: list[int] = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()

        def free_port() -> int:
            picked.append(taken.getsockname()[1] if not picked else real_free_port())
            return picked[-1]

        monkeypatch.setattr(cluster, "free_port", free_port)
        with cluster.start(tmp_path, controllers=False, scheduler=False) as plane:
            assert plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
            assert str(picked[0]) not in plane.server
    assert len(picked) >= 5  # etcd's two ports twice (the first try refused), the API server's
