"""The real control plane starts from the pinned build, its controllers do their work, and
gpuguard's chart passes `helm lint` and installs into it with every object admitted."""

from __future__ import annotations

import json
from pathlib import Path

from gpuguard.sim.control_plane import cluster, versions
from tests import chart, waits
from tests.realcluster import helm


def test_it_serves_the_pinned_release(real_plane: cluster.ControlPlane) -> None:
    version = json.loads(real_plane.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"].startswith(versions.KUBERNETES)
    assert real_plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    # The DRA device-taint API gpuguard's DeviceTaintRules use is served.
    resources = real_plane.kubectl("api-resources", "--api-group=resource.k8s.io", "-o", "name")
    assert "devicetaintrules.resource.k8s.io" in resources.stdout.split()


def test_the_real_job_controller_ends_a_job_at_its_deadline_and_ttl_deletes_it(
    real_plane: cluster.ControlPlane,
) -> None:
    """What the simulator's Job controller models (sim/kubelet.py): no kubelet runs the pod,
    so only the deadline ends the Job, then the TTL controller deletes it and its pod."""
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "deadline", "namespace": "default"},
        "spec": {"activeDeadlineSeconds": 2, "ttlSecondsAfterFinished": 3, "backoffLimit": 0,
                 "template": {"spec": {"restartPolicy": "Never", "nodeName": "nowhere",
                                       "containers": [{"name": "c", "image": "busybox"}]}}},
    }
    real_plane.kubectl("create", "-f", "-", stdin=json.dumps(job))

    seen: list[dict[str, str]] = []

    def failed() -> bool:
        got = real_plane.kubectl("get", "job", "deadline", "-o", "json", check=False)
        conditions = json.loads(got.stdout or "{}").get("status", {}).get("conditions", [])
        seen[:] = [c for c in conditions if c["type"] == "Failed"]
        return bool(seen)

    assert waits.eventually(failed, timeout_s=60, every_s=0.5), "the Job never failed"
    assert seen[0]["reason"] == "DeadlineExceeded"

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
    status = installed.kubectl("get", "validatingadmissionpolicies", "-o", "json")
    policies = json.loads(status.stdout)["items"]
    # The API server type-checked every policy's CEL against the kinds it matches.
    warnings = {p["metadata"]["name"]: p.get("status", {}).get("typeChecking") for p in policies}
    assert all(not (w or {}).get("expressionWarnings") for w in warnings.values()), warnings
