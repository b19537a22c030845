"""The node cache's converter holds the strings that repeat from node to node once
(docs/design.md#fast-path: 10,000 cached Nodes within the controller's memory), and reads
every label, annotation and condition exactly as ``node_from_dict`` does."""

from __future__ import annotations

import json
from typing import Any

from gpuguard.sources import kubernetes, watched_cluster

FEATURES = ",".join(f"cpu-cpuid.FLAG{i}" for i in range(100))


def node_json(name: str) -> dict[str, Any]:
    """A Node as a fresh decode of the API's answer gives it (own copies of every string)."""
    node = {
        "metadata": {
            "name": name,
            "resourceVersion": "7",
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                       "kubernetes.io/hostname": name},
            "annotations": {"nfd.node.kubernetes.io/feature-labels": FEATURES,
                            "gpuguard.io/isolated-at": "2026-12-01T00:00:00Z"},
        },
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }  # fmt: skip
    decoded: dict[str, Any] = json.loads(json.dumps(node))
    return decoded


def test_two_nodes_hold_one_copy_of_a_repeated_annotation_and_label() -> None:
    a = watched_cluster.read_node(node_json("gpu-a"))
    b = watched_cluster.read_node(node_json("gpu-b"))
    key = "nfd.node.kubernetes.io/feature-labels"
    assert a.annotations[key] is b.annotations[key]
    assert a.labels["nvidia.com/gpu.product"] is b.labels["nvidia.com/gpu.product"]


def test_the_cached_node_reads_as_the_listed_one() -> None:
    assert watched_cluster.read_node(node_json("gpu-a")) == kubernetes.node_from_dict(
        node_json("gpu-a")
    )
