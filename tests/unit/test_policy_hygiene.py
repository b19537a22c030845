"""Workload hygiene from the phantom incident's [docs/design.md#incidents] defence layers: no
orphaned CUDA contexts after a failure."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpuguard.model import decisions
from gpuguard.model import settings as settings_model
from gpuguard.policy import hygiene

Reason = decisions.Reason
SETTINGS = settings_model.HygieneSettings()


def rayjob(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ml-training", "name": "nccl-check"}, "spec": spec}


def pod(
    gpus: int = 8,
    grace: int | None = 300,
    env: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    env_from: bool = False,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "worker",
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {},
    }
    if env_from:
        container["envFrom"] = [{"configMapRef": {"name": "nccl"}}]
    spec: dict[str, Any] = {"nodeName": "gpu-node-1", "containers": [container]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"namespace": "ml-training", "name": "w0", "labels": labels or {}},
            "spec": spec}  # fmt: skip


DIST = {"WORLD_SIZE": "32", "MASTER_ADDR": "head"}

CASES = [
    pytest.param([], [rayjob()], [Reason.RAYJOB_KEEPS_CLUSTER], id="seed000-rayjob-keeps-gpus"),
    pytest.param(
        [], [rayjob(shutdownAfterJobFinishes=False)], [Reason.RAYJOB_KEEPS_CLUSTER], id="false"
    ),
    pytest.param([], [rayjob(shutdownAfterJobFinishes=True)], [], id="rayjob-shuts-down"),
    pytest.param([pod(grace=None)], [], [Reason.SHORT_GRACE_PERIOD], id="default-30s-grace"),
    pytest.param([pod(grace=10)], [], [Reason.SHORT_GRACE_PERIOD], id="grace-10s"),
    pytest.param([pod(grace=300)], [], [], id="grace-300s"),
    pytest.param([pod(gpus=0, grace=0)], [], [], id="cpu-pod-ignored"),
    pytest.param([pod(env=DIST)], [], [Reason.NCCL_HANG_UNBOUNDED], id="ddp-without-nccl-abort"),
    pytest.param(
        [pod(env=DIST | {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})], [], [], id="async-handling"
    ),
    pytest.param([pod(env=DIST | {"NCCL_BLOCKING_WAIT": "1"})], [], [], id="legacy-blocking"),
    pytest.param(
        [pod(env=DIST | {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"})],
        [],
        [Reason.NCCL_HANG_UNBOUNDED],
        id="async-handling-off",
    ),
    pytest.param(
        [pod(labels={"training.kubeflow.org/job-name": "llm"})],
        [],
        [Reason.NCCL_HANG_UNBOUNDED],
        id="pytorchjob-label",
    ),
    pytest.param([pod(env=DIST, env_from=True)], [], [], id="env-from-configmap-not-judged"),
    pytest.param([pod(env={"BATCH": "8"})], [], [], id="single-gpu-job"),
    pytest.param(
        [pod(grace=5, env=DIST)],
        [],
        [Reason.SHORT_GRACE_PERIOD, Reason.NCCL_HANG_UNBOUNDED],
        id="both-problems",
    ),
]


@pytest.mark.parametrize(("pods", "rayjobs", "expected"), CASES)
def test_hygiene_findings(
    pods: list[dict[str, Any]], rayjobs: list[dict[str, Any]], expected: list[Reason]
) -> None:
    found = hygiene.review(pods, rayjobs, SETTINGS)
    assert [f.reason for f in found] == expected
    assert all(f.kind == "hygiene" and f.evidence for f in found)


def test_findings_name_the_object_and_node() -> None:
    (grace,) = hygiene.review([pod(grace=10)], [], SETTINGS)
    assert grace.node == "gpu-node-1"
    assert "ml-training/w0" in grace.detail
    (job,) = hygiene.review([], [rayjob()], SETTINGS)
    assert "ml-training/nccl-check" in job.detail
    assert "shutdownAfterJobFinishes" in job.detail


def test_the_grace_minimum_is_a_setting() -> None:
    strict = settings_model.HygieneSettings(min_grace_period=timedelta(minutes=10))
    assert [f.reason for f in hygiene.review([pod(grace=300)], [], strict)] == [
        Reason.SHORT_GRACE_PERIOD
    ]
