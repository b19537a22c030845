"""`sim serve --control-plane real`: the live world's Kubernetes side on the real control
plane — etcd, API server, controller-manager and scheduler started in the serve folder, the
chart installed by Helm, the world carried to it by ``bridge.Bridge``, and a kubeconfig with
gpuguard's own ServiceAccount token for ``gpuguard run``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpuguard.sim import world
from gpuguard.sim.control_plane import bridge, chart, cluster


@dataclass(frozen=True)
class RealParts:
    server: str
    kubeconfig: Path  # cluster-admin, for a person
    guard_kubeconfig: Path  # gpuguard's ServiceAccount, for `gpuguard run`
    guard_identity: str  # the controller pod that token is bound to: its Lease's holder
    bridge: bridge.Bridge


@contextmanager
def serve(played: world.World, folder: Path, run: bridge.RunCommand) -> Iterator[RealParts]:
    """Start it all, carry the world's first instant over, yield; stop it all on exit."""
    with cluster.start(folder / "control-plane") as plane:
        chart.install(plane)
        # The NVIDIA runtime's RuntimeClass, as the GPU Operator installs it: gpuguard's Jobs
        # name it, and the RuntimeClass admission plugin refuses a pod naming a missing one.
        plane.request(
            "POST",
            "/apis/node.k8s.io/v1/runtimeclasses",
            {"metadata": {"name": "nvidia"}, "handler": "nvidia"},
        )
        carried = bridge.Bridge(played, plane, run)
        carried.sync()
        guard, pod = chart.pod_bound_kubeconfig(
            plane, "gpuguard", "controller", folder / "gpuguard.kubeconfig"
        )
        yield RealParts(plane.server, plane.kubeconfig, guard, pod, carried)
