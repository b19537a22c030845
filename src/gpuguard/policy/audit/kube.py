"""Reading Kubernetes objects as the API returns them (plain JSON): names, labels, GPU
requests, owners, times, image versions — the small accessors every audit rule shares."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from gpuguard.model import timestamps
from gpuguard.model.audit import AuditView, Input, Obj

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
PRODUCT_LABEL = "nvidia.com/gpu.product"
_FINISHED = ("Succeeded", "Failed")
_VERSION = re.compile(r"v(\d+)\.(\d+)(?:\.(\d+))?")


def meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def spec(obj: Obj) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def status(obj: Obj) -> Mapping[str, Any]:
    return obj.get("status") or {}


def name(obj: Obj) -> str:
    return str(meta(obj).get("name") or "?")


def ref(kind: str, obj: Obj) -> str:
    """``Node/gpu-1`` or ``Pod/ml/train-0``: how a finding names an object."""
    namespace = meta(obj).get("namespace")
    return f"{kind}/{namespace}/{name(obj)}" if namespace else f"{kind}/{name(obj)}"


def labels(obj: Obj) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def notes(obj: Obj) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def quantity(values: Mapping[str, Any] | None, key: str) -> int:
    try:
        return int(str((values or {}).get(key, "0")))
    except ValueError:
        return 0


def containers(pod: Obj) -> list[Mapping[str, Any]]:
    return list(spec(pod).get("containers") or [])


def gpu_request(pod: Obj) -> int:
    total = 0
    for container in containers(pod):
        resources = container.get("resources") or {}
        total += quantity(resources.get("limits") or resources.get("requests"), GPU_RESOURCE)
    return total


def unfinished(pod: Obj) -> bool:
    return status(pod).get("phase") not in _FINISHED


def gpu_pods(view: AuditView) -> Iterator[Obj]:
    """Pods that request GPUs and have not finished."""
    return (p for p in view.of(Input.PODS) if gpu_request(p) > 0 and unfinished(p))


def owner_kind(obj: Obj) -> str | None:
    owners = meta(obj).get("ownerReferences") or []
    return str(owners[0].get("kind")) if owners else None


def gpu_capacity(node: Obj) -> int:
    return quantity(status(node).get("capacity"), GPU_RESOURCE)


def gpu_allocatable(node: Obj) -> int:
    return quantity(status(node).get("allocatable"), GPU_RESOURCE)


def is_gpu_node(node: Obj) -> bool:
    return gpu_capacity(node) > 0 or labels(node).get(GPU_PRESENT_LABEL) == "true"


def gpu_nodes(view: AuditView) -> list[Obj]:
    return [n for n in view.of(Input.NODES) if is_gpu_node(n)]


def condition(obj: Obj, kind: str) -> Mapping[str, Any] | None:
    return next((c for c in status(obj).get("conditions") or [] if c.get("type") == kind), None)


def is_ready(obj: Obj) -> bool:
    found = condition(obj, "Ready")
    return found is not None and found.get("status") == "True"


def cordoned(node: Obj) -> bool:
    return bool(spec(node).get("unschedulable"))


def time_of(text: object) -> datetime | None:
    return timestamps.parse_utc(str(text)) if text else None


def version(text: str) -> tuple[int, int, int] | None:
    """``v1.34.3+rke2r1`` or an image tag ``v0.17.1-ubi9`` → (1, 34, 3); None when the text
    does not start with a ``v`` version (``latest``, ``2024.01``, a digest)."""
    match = _VERSION.match(text.strip())
    return (int(match[1]), int(match[2]), int(match[3] or 0)) if match else None


def image_tag(image: str) -> str:
    """The tag of ``repo/name:tag`` (digest removed); "" when the image has none."""
    image = image.split("@", 1)[0]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def env(container: Mapping[str, Any]) -> dict[str, str]:
    return {str(e.get("name")): str(e.get("value") or "") for e in container.get("env") or []}


def pods_named(view: AuditView, *fragments: str) -> list[Obj]:
    """Pods whose name, or ``app``/``app.kubernetes.io/name``/``k8s-app`` label, contains one
    of ``fragments`` (how the GPU Operator's and the Helm charts' pods are recognised)."""
    def hay(pod: Obj) -> str:
        shown = labels(pod)
        keys = ("app", "app.kubernetes.io/name", "k8s-app", "component")
        return " ".join([name(pod), *(shown.get(k, "") for k in keys)])

    return [p for p in view.of(Input.PODS) if any(f in hay(p) for f in fragments)]


def node_of(pod: Obj) -> str | None:
    found = spec(pod).get("nodeName")
    return str(found) if found else None
