"""The NVIDIA GPU Operator on the nodes a scenario says it manages (``gpu_operator: true``).

The operator labels each GPU node with one ``nvidia.com/gpu.deploy.<operand>`` switch per
operand, ``true`` where the label is missing (gpu-operator ``controllers/state_manager.go``:
it adds its state labels to GPU nodes and leaves a value that is already there), and each
operand's DaemonSet selects ``nvidia.com/gpu.deploy.<operand>=true``: a node labelled
``nvidia.com/gpu.deploy.device-plugin=false`` loses the operator's device-plugin pod, the
same switch NVIDIA's own MIG reconfiguration uses to stop GPU clients on a node
(mig-parted ``reconfigure-mig.sh``); removing the label brings it back. The operator's plugin
runs privileged and sees every GPU (gpu-operator issue #1388).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuguard.sim import store

PREFIX = "nvidia.com/gpu.deploy."
OPERANDS = ("driver", "container-toolkit", "device-plugin", "dcgm", "dcgm-exporter",
            "gpu-feature-discovery", "operator-validator")
DEVICE_PLUGIN = PREFIX + "device-plugin"
MANAGER = "gpu-operator"


def node_labels() -> dict[str, str]:
    """The operand labels the operator puts on a GPU node it manages."""
    return {PREFIX + operand: "true" for operand in OPERANDS}


def relabel(objects: store.ObjectStore, node: str, labels: Mapping[str, str]) -> dict[str, str]:
    """The operator's reconcile of one node: a missing operand label is set to ``true``;
    returns the node's labels after it."""
    missing = {k: v for k, v in node_labels().items() if k not in labels}
    if not missing:
        return dict(labels)
    objects.merge_patch("Node", "", node, {"metadata": {"labels": missing}}, manager=MANAGER)
    return dict(labels) | missing


def plugin_runs(labels: Mapping[str, str]) -> bool:
    """Whether the operator's device-plugin DaemonSet selects the node."""
    return labels.get(DEVICE_PLUGIN) == "true"
