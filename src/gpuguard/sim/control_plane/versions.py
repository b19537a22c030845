"""The one place the real tools' versions are pinned, and the cache they are built into.

The cache directory is keyed by every version and the Go toolchain, so a version bump builds
afresh beside the old build and a second run on the same machine reuses the first's binaries.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

KUBERNETES = "v1.37.2"
# Every k8s.io staging module at the release's own minor (k8s.io/kubernetes' go.mod replaces
# them with ./staging/src/k8s.io/... at v0.0.0, which the proxy does not serve).
KUBERNETES_STAGING = "v0.37.2"
ETCD = "v3.6.16"
HELM = "v4.3.2"
PROMETHEUS = "v0.316.0"  # Prometheus 3.x: its Go module is tagged v0.3XX for release 3.XX

CACHE_ENV = "GPUGUARD_CONTROL_PLANE_CACHE"


@dataclass(frozen=True, slots=True)
class Tool:
    """One binary: its name in bin/, the module it comes from and the package to build."""

    name: str
    module: str
    version: str
    package: str


KUBERNETES_TOOLS = (
    Tool("kube-apiserver", "k8s.io/kubernetes", KUBERNETES, "k8s.io/kubernetes/cmd/kube-apiserver"),
    Tool(
        "kube-controller-manager",
        "k8s.io/kubernetes",
        KUBERNETES,
        "k8s.io/kubernetes/cmd/kube-controller-manager",
    ),
    Tool("kube-scheduler", "k8s.io/kubernetes", KUBERNETES, "k8s.io/kubernetes/cmd/kube-scheduler"),
    Tool("kubectl", "k8s.io/kubernetes", KUBERNETES, "k8s.io/kubernetes/cmd/kubectl"),
)
ETCD_TOOL = Tool("etcd", "go.etcd.io/etcd/server/v3", ETCD, "go.etcd.io/etcd/server/v3")
HELM_TOOL = Tool("helm", "helm.sh/helm/v4", HELM, "helm.sh/helm/v4/cmd/helm")
PROMETHEUS_TOOL = Tool(
    "prometheus",
    "github.com/prometheus/prometheus",
    PROMETHEUS,
    "github.com/prometheus/prometheus/cmd/prometheus",
)
ALL_TOOLS = (*KUBERNETES_TOOLS, ETCD_TOOL, HELM_TOOL, PROMETHEUS_TOOL)


def cache_root() -> Path:
    """Where builds are kept: $GPUGUARD_CONTROL_PLANE_CACHE, or ~/.cache/gpuguard/control-plane."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "gpuguard" / "control-plane"


def build_key() -> str:
    """A short name for this set of pinned versions (and so the folder its build lives in)."""
    pinned = "|".join(f"{tool.name}={tool.version}" for tool in ALL_TOOLS)
    digest = hashlib.sha256(pinned.encode()).hexdigest()[:12]
    return f"k8s-{KUBERNETES}-{digest}"


def bin_dir() -> Path:
    """The folder the pinned binaries are built into."""
    return cache_root() / build_key() / "bin"
