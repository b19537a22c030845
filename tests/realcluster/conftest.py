"""The real-cluster tier: a real kube-apiserver, controller-manager and scheduler (with etcd)
from the pinned build (``scripts/control-plane build``), one per test worker, and gpuguard's
chart installed into it by the real Helm.

Like every external program (tests/tools.py), a missing build skips on a developer's machine
and FAILS under CI, where ``scripts/test`` builds it first.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuguard.sim.control_plane import cluster
from tests import tools
from tests.realcluster import helm

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    """The pinned build's binaries (kubectl, helm, prometheus, ...)."""
    try:
        return cluster.require_built()
    except cluster.ControlPlaneError as e:
        tools.missing(str(e))


@pytest.fixture(scope="session")
def real_plane(
    bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[cluster.ControlPlane]:
    """A real control plane for this worker's session; stopped at the end."""
    with cluster.start(tmp_path_factory.mktemp("control-plane")) as plane:
        yield plane


@pytest.fixture(scope="session")
def installed(real_plane: cluster.ControlPlane) -> cluster.ControlPlane:
    """The real control plane with gpuguard's chart installed by Helm (release gpuguard,
    namespace gpuguard, default values) and the prometheus-operator kinds it uses."""
    install_chart(real_plane)
    return real_plane


def install_chart(plane: cluster.ControlPlane) -> None:
    """The prometheus-operator kinds the chart uses, then the chart by `helm install`."""
    real_plane = plane
    real_plane.kubectl("apply", "-f", str(Path(__file__).with_name("crds.yaml")))
    real_plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/podmonitors.monitoring.coreos.com",
        "crd/servicemonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com",
    )
    helm.install(real_plane)
