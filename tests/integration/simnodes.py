"""Nodes and isolation actions for tests against the simulator's Kubernetes API: a GPU node
with every field the real API returns (lightkube decodes strictly), and gpuguard's Xid 79
isolation of it."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuguard.model import annotation_keys, decisions
from tests.conftest import SimApi

NOW = datetime(2026, 9, 21, 6, 5, 10, tzinfo=UTC)


def node_info(name: str) -> dict[str, str]:
    """Every field the real API returns (lightkube decodes strictly)."""
    return {
        "architecture": "amd64",
        "bootID": f"boot-{name}",
        "containerRuntimeVersion": "containerd://1.7.23-k3s2",
        "kernelVersion": "6.8.0-45-generic",
        "kubeProxyVersion": "v1.31.4+rke2r1",
        "kubeletVersion": "v1.31.4+rke2r1",
        "machineID": "m",
        "operatingSystem": "linux",
        "osImage": "Ubuntu 24.04.1 LTS",
        "systemUUID": "s",
    }


def seed_node(api: SimApi, name: str, allocatable: str = "8") -> None:
    api.store.create(
        "Node",
        "",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
            "spec": {},
            "status": {
                "capacity": {"nvidia.com/gpu": "8"},
                "allocatable": {"nvidia.com/gpu": allocatable},
                "nodeInfo": node_info(name),
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )


def isolate_action(name: str) -> decisions.Action:
    return decisions.Action(
        kind=decisions.ActionKind.ISOLATE,
        node=name,
        reason=decisions.Reason.FAST_PATH,
        evidence=(decisions.Evidence("DCGM_FI_DEV_XID_ERRORS{gpu=4}", "79", NOW),),
        annotations={annotation_keys.REASON: "xid-79", annotation_keys.ISOLATED_AT: "t"},
        detail="xid-79 on GPU 4",
    )
