"""Builders for the return-to-pool policy: a node gpuguard isolated for Xid 79 on 9/21 and
power-cycled since, its system pods, burn-in results and the return facts, all conditions met
unless a test changes one (the lifecycle report's 9/22 return, docs/design.md#incidents)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions, fleet, settings
from gpuguard.model import return_to_pool as model

Status = decisions.CheckStatus

ISOLATED_AT = datetime(2026, 9, 21, 5, 53, 30, tzinfo=UTC)
NOW = datetime(2026, 9, 22, 16, 30, tzinfo=UTC)
CARD = "GPU-5e2b1c3d-0004"
BOOT_AT_ISOLATION = "6f1c0a2e-boot-before"
BOOT_AFTER_POWER_CYCLE = "91d4e7b0-boot-after"
GUARD = settings.GuardSettings()


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def marks(reason: str = "xid-79", **extra: str) -> dict[str, str]:
    """gpuguard's annotations as ``policy.isolate`` writes them, plus any extra keys."""
    return {
        keys.REASON: reason,
        keys.ISOLATED_AT: stamp(ISOLATED_AT),
        keys.BOOT_ID: BOOT_AT_ISOLATION,
        keys.GPU_CAPACITY: "8",
        keys.GPU_UUID: CARD,
        keys.GPU_PCI: "0000:99:00.0",
        **extra,
    }


def node(
    annotations: dict[str, str] | None = None,
    *,
    cordoned: bool = True,
    boot: str = BOOT_AFTER_POWER_CYCLE,
    capacity: int = 8,
    allocatable: int = 8,
) -> fleet.Node:
    return fleet.Node(
        name="gpu-node-b",
        boot_id=boot,
        gpu_capacity=capacity,
        gpu_allocatable=allocatable,
        unschedulable=cordoned,
        annotations=marks() if annotations is None else annotations,
        conditions={"Ready": "True"},
    )


def pod(
    name: str,
    namespace: str = "kube-system",
    *,
    ready: bool = True,
    gpus: int = 0,
    phase: fleet.PodPhase = fleet.PodPhase.RUNNING,
) -> fleet.Pod:
    return fleet.Pod(namespace, name, "gpu-node-b", phase, gpu_request=gpus, ready=ready)


def system_pods(*, kube_proxy_ready: bool = True) -> tuple[fleet.Pod, ...]:
    return (
        pod("kube-proxy-gpu-node-b", ready=kube_proxy_ready),
        pod("rke2-canal-7x2kq"),
        pod("nvidia-device-plugin-daemonset-x8c2v", "gpu-operator"),
    )


def burnin(
    outcome: model.BurninOutcome = model.BurninOutcome.PASSED,
    *,
    mode: model.BurninMode = model.BurninMode.MATMUL,
    boot: str = BOOT_AFTER_POWER_CYCLE,
    started: datetime = datetime(2026, 9, 22, 16, 26, tzinfo=UTC),
    failed_check: str = "",
) -> model.BurninResult:
    return model.BurninResult(
        outcome=outcome,
        mode=mode,
        boot_id=boot,
        started_at=started,
        failed_check=failed_check,
        detail="8 GPUs 203.6-212.7 TFLOPS" if not failed_check else "",
    )


HEALTHY = model.ReturnFacts(
    pods=system_pods(),
    hardware_xids_since_boot=(),
    card_faults=1,
    row_remap_pending={str(gpu): 0.0 for gpu in range(8)},
    conformance={"ipvs-loaded": Status.PASS, "nvidia-match": Status.PASS},
    pcie_links=tuple(model.PcieLink(str(g), 16, 16, 1, 4) for g in range(8)),
    burnin=burnin(),
)
"""gpu-node-b at 16:30 on 9/22 as the seed tells it, had gpuguard read everything."""


def facts(**changes: object) -> model.ReturnFacts:
    return dataclasses.replace(HEALTHY, **changes)  # type: ignore[arg-type]


XID_79_AGAIN = decisions.Evidence("gpuguard_xid_total recent", "1 occurrence(s) of Xid 79")
