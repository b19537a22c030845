"""`gpuguard hygiene` against the simulator's API: GPU pods with a short grace period and
distributed training without NCCL error handling are reported; a cluster without the Ray
operator has no RayJobs (not an error)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app
from tests.conftest import SimApi

pytestmark = pytest.mark.integration


def gpu_pod(name: str, grace: int, env: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "nodeName": "gpu-node-1",
            "terminationGracePeriodSeconds": grace,
            "containers": [
                {
                    "name": "main",
                    "image": "trainer",
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def test_hygiene_reports_risky_gpu_workloads(sim_api: SimApi) -> None:
    distributed = {"WORLD_SIZE": "16", "MASTER_ADDR": "trainer-0"}
    safe = distributed | {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    sim_api.store.create("Pod", "ml", gpu_pod("risky", 5, distributed))
    sim_api.store.create("Pod", "ml", gpu_pod("careful", 120, safe))
    result = CliRunner().invoke(app, ["hygiene", "--kube-server", sim_api.url, "-o", "json"])
    assert result.exit_code == 0, result.output
    findings = json.loads(result.stdout)
    assert sorted(f["reason"] for f in findings) == ["nccl-hang-unbounded", "short-grace-period"]
    assert all("risky" in f["detail"] for f in findings)
