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
# Bumped when how the tools are built changes (flags, version stamps), so a cache built the
# old way is not reused.
RECIPE = 2


@dataclass(frozen=True, slots=True)
class Tool:
    """One binary: its name in bin/, the module it comes from, the package to build and the
    version variables its release build stamps (``-X``; unstamped, kube-apiserver reports
    ``v0.0.0-master`` and kubectl refuses to parse it)."""

    name: str
    module: str
    version: str
    package: str
    stamps: tuple[tuple[str, str], ...] = ()


def _kubernetes_stamps() -> tuple[tuple[str, str], ...]:
    """What Kubernetes' hack/lib/version.sh stamps into both version packages."""
    major, minor, _ = KUBERNETES.removeprefix("v").split(".")
    fields = {
        "gitVersion": KUBERNETES,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    return tuple(
        (f"{package}.{name}", value)
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for name, value in fields.items()
    )


KUBERNETES_TOOLS = tuple(
    Tool(
        name, "k8s.io/kubernetes", KUBERNETES, f"k8s.io/kubernetes/cmd/{name}", _kubernetes_stamps()
    )
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
)
ETCD_TOOL = Tool("etcd", "go.etcd.io/etcd/server/v3", ETCD, "go.etcd.io/etcd/server/v3")
HELM_TOOL = Tool(
    "helm",
    "helm.sh/helm/v4",
    HELM,
    "helm.sh/helm/v4/cmd/helm",
    (("helm.sh/helm/v4/internal/version.version", HELM),),
)
PROMETHEUS_TOOL = Tool(
    "prometheus",
    "github.com/prometheus/prometheus",
    PROMETHEUS,
    "github.com/prometheus/prometheus/cmd/prometheus",
    (("github.com/prometheus/common/version.Version", "3." + PROMETHEUS.split(".")[1][1:] + ".0"),),
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
    pinned = "|".join(f"{tool.name}={tool.version}" for tool in ALL_TOOLS) + f"|recipe={RECIPE}"
    digest = hashlib.sha256(pinned.encode()).hexdigest()[:12]
    return f"k8s-{KUBERNETES}-{digest}"


def bin_dir() -> Path:
    """The folder the pinned binaries are built into."""
    return cache_root() / build_key() / "bin"
