"""gpuguard's own GPU reset in the simulator (docs/remediation.md#gpu-reset): the pinned Job's
``nvidia-smi -r -i <uuid>`` runs the simulator's reset (demo/job_commands.py); the fault-to-
return time before (gpu-reset-xid119: a person resets the GPU the next morning) and after
(gpu-reset-xid119-auto: gpuguard does); a held card is never reset; a reset that fails ends
in the person's request, once."""

from __future__ import annotations

import json

import pytest

from gpuguard.demo import harness, score
from gpuguard.model import annotation_keys as keys
from gpuguard.model import settings
from tests import demo_runs
from tests.admission import IMAGE

POOL = "NVIDIA-H100-80GB-HBM3"
OFF = settings.GuardSettings.load(None, {"GPUGUARD_CONTROLLER__IMAGE": IMAGE})
ON = settings.GuardSettings.load(None, {
    "GPUGUARD_CONTROLLER__IMAGE": IMAGE, "GPUGUARD_REMEDIATION__GPU_RESET_POOLS": POOL})


@pytest.fixture(scope="module")
def before() -> harness.ScenarioRun:
    return demo_runs.play("gpu-reset-xid119", OFF)


@pytest.fixture(scope="module")
def after() -> harness.ScenarioRun:
    return demo_runs.play("gpu-reset-xid119-auto", ON)


def test_fault_to_return_falls_from_hours_to_minutes(
    before: harness.ScenarioRun, after: harness.ScenarioRun
) -> None:
    assert before.verdicts["gpu-node-b"] == after.verdicts["gpu-node-b"] == ["gpu-reset"]
    assert demo_runs.events(before, "remediation_done") == []  # off: the person's reset
    waited = demo_runs.fault_to_return_s(before, "gpu-node-b")
    reset = demo_runs.fault_to_return_s(after, "gpu-node-b")
    assert (round(waited), round(reset)) == (28320, 900)


def test_gpuguard_resets_the_card_once_with_its_pinned_job(after: harness.ScenarioRun) -> None:
    (reset,) = demo_runs.events(after, "gpu_reset", "gpu-node-b")
    (done,) = demo_runs.events(after, "remediation_done", "gpu-node-b")
    (verdict,) = demo_runs.events(after, "verdict", "gpu-node-b")
    assert reset["detail"] == "GPU 2 reset; operands restarted, allocatable 8"
    assert done["detail"].startswith("gpu-reset: nvidia-smi -r -i GPU-")
    assert done["detail"].endswith(": exit 0")
    assert done["t"] - verdict["t"] == 90.0  # the Job created the next tick, read a minute on
    (job,) = [j for j in after.played.store.list("Job", "gpuguard")
              if j["metadata"]["labels"]["gpuguard.io/job"] == "gpu-reset"
              and j["metadata"]["labels"]["gpuguard.io/node"] == "gpu-node-b"]
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeName"] == "gpu-node-b"
    assert spec["containers"][0]["securityContext"]["capabilities"] == {
        "drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert "gpu-node-b" in score.scenario_report(after)["returned"]
    lines = [line for cm in after.played.store.list("ConfigMap", "gpuguard")
             for text in (cm.get("data") or {}).values() for line in text.splitlines()]
    assert len([line for line in lines if " gpu_reset " in line]) == 1
    assert demo_runs.events(after, "isolate", "gpu-node-a") == []


def test_a_held_card_is_never_reset(after: harness.ScenarioRun) -> None:
    assert after.verdicts["gpu-node-c"] == ["gpu-reset"]
    assert demo_runs.events(after, "gpu_reset", "gpu-node-c") == []
    assert keys.REMEDIATION not in demo_runs.node_marks(after, "gpu-node-c")
    assert "gpu-node-c" not in after.returned_at


def test_a_reset_that_fails_ends_in_the_persons_request_once(after: harness.ScenarioRun) -> None:
    (failed,) = demo_runs.events(after, "remediation_failed", "gpu-node-d")
    assert failed["reason"] == "remediation-failed"
    assert demo_runs.events(after, "gpu_reset", "gpu-node-d") == []  # the GPU was not reset
    marks = demo_runs.node_marks(after, "gpu-node-d")
    assert json.loads(marks[keys.REMEDIATION])["result"] == "failed"
    assert marks[keys.REQUEST].startswith("automated GPU reset failed (nvidia-smi -r -i GPU-")
    assert "reset the GPU by hand." in marks[keys.REQUEST]
    assert len([j for j in after.played.store.list("Job", "gpuguard")
                if j["metadata"]["labels"]["gpuguard.io/job"] == "gpu-reset"
                and j["metadata"]["labels"]["gpuguard.io/node"] == "gpu-node-d"]) == 1
    assert "gpu-node-d" not in after.returned_at
