"""A scenario played on a real control plane: the demo's harness (``demo.harness``) with the
guard and the agents talking to a real API server, the real Job controller, TTL controller,
PodGC, scheduler and node lifecycle controller doing their work, and the simulator only
playing the kubelets and the hardware (``sim.control_plane.bridge``).

The scenario's clock and the control plane's are not the same clock. The world steps its
simulated time as fast as it can while nothing of the real controllers' is in flight; while
one of gpuguard's Jobs is unfinished there, simulated time is paced to the wall clock at
``speed`` (10: ten simulated seconds per wall second), so that what the real Job controller
times — a pod's run, a Job's ``activeDeadlineSeconds`` — lands at the simulated time it
would. The guard's settings are scaled to match (``wall_clock_settings``): its Jobs'
deadlines are written in wall seconds. Used by the real-cluster tier
(``tests/realcluster/test_scenarios_real.py``); ``gpuguard demo`` stays on the simulator's
own API, pip-only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import lightkube

from gpuguard.demo import guard_reads, harness, job_commands
from gpuguard.model import settings as settings_model
from gpuguard.sim import kubelet, world
from gpuguard.sim.control_plane import bridge, chart, cluster
from gpuguard.sources import watched_cluster

_TERMINAL = {"Complete", "Failed", "FailureTarget", "SuccessCriteriaMet"}
SIM_JOB_RUNTIME = kubelet.JobKubelet.runtime  # the simulator's kubelets run a Job pod this long


def wall_clock_settings(
    settings: settings_model.GuardSettings, speed: float
) -> settings_model.GuardSettings:
    """``settings`` with the Jobs' deadlines in wall seconds: the real Job controller counts
    them on the wall clock, which runs ``speed`` times slower than the scenario's while a Job
    is in flight."""
    controller = settings.controller.model_copy(
        update={"evidence_deadline": settings.controller.evidence_deadline / speed}
    )
    back = settings.return_to_pool.model_copy(
        update={"burnin_deadline": settings.return_to_pool.burnin_deadline / speed}
    )
    return settings.model_copy(update={"controller": controller, "return_to_pool": back})


def api(plane: cluster.ControlPlane, speed: float) -> harness.ApiFactory:
    """The harness's API on ``plane`` (started, the chart installed by Helm)."""

    @contextmanager
    def served(
        played: world.World, hosts: Path, settings: settings_model.GuardSettings
    ) -> Iterator[harness.Api]:
        runner = job_commands.runner(played, hosts, settings.controller.xid_overrides)
        carried = bridge.Bridge(played, plane, runner, runtime=SIM_JOB_RUNTIME / speed)
        kubelets = PacedKubelets(carried, plane, speed)
        kubelets.step()  # the nodes registered, so the chart's pods can be placed
        guard, _ = chart.pod_bound_kubeconfig(
            plane, "gpuguard", "controller", hosts / "gpuguard.kubeconfig"
        )
        yield harness.Api(
            guard=lightkube.KubeConfig.from_file(guard),
            agent=AgentIdentities(plane, hosts),
            kubelets=kubelets,
            caught_up=RealCaughtUp(plane, kubelets),
            stops_with_run=False,
        )

    return served


@dataclass
class AgentIdentities:
    """Each node's agent's kubeconfig: a token of ``gpuguard-agent`` bound to the chart's agent
    pod on that node (the DaemonSet controller made it), as its kubelet would mint it — the
    chart's policies let an agent write only its own Node's conditions."""

    plane: cluster.ControlPlane
    folder: Path
    timeout_s: float = 30.0
    _configs: dict[str, lightkube.KubeConfig] = field(default_factory=dict)

    def __call__(self, node: str) -> lightkube.KubeConfig:
        if node not in self._configs:
            token = self.plane.pod_bound_token(chart.NAMESPACE, "gpuguard-agent", self._pod(node))
            path = self.plane.write_kubeconfig(
                self.folder / f"agent-{node}.kubeconfig", token, "gpuguard-agent"
            )
            self._configs[node] = lightkube.KubeConfig.from_file(path)
        return self._configs[node]

    def _pod(self, node: str) -> dict[str, Any]:
        selector = "app.kubernetes.io/component=agent"
        deadline = time.monotonic() + self.timeout_s
        while True:
            _, listed = self.plane.request(
                "GET",
                f"/api/v1/namespaces/{chart.NAMESPACE}/pods?labelSelector={selector}"
                f"&fieldSelector=spec.nodeName%3D{node}",
            )
            items = listed.get("items", []) if isinstance(listed, dict) else []
            if items:
                return dict(items[0])
            if time.monotonic() > deadline:
                raise cluster.ControlPlaneError(
                    f"no agent pod of gpuguard's on {node} after {self.timeout_s:.0f}s"
                )
            time.sleep(0.2)


@dataclass
class PacedKubelets:
    """The simulator's kubelets on the real control plane, carried over only when something
    changed, with simulated time paced to the wall clock while gpuguard has a Job in flight."""

    carried: bridge.Bridge
    plane: cluster.ControlPlane
    speed: float
    _seen: tuple[int, int] | None = None
    _in_flight: bool = False
    _paced_from: tuple[datetime, float] | None = None  # (simulated, wall) when pacing began
    _ticked: bool = False
    syncs: int = 0

    def due(self, now: datetime) -> bool:
        played = self.carried.played
        moved = (played.store.resource_version, len(played.timeline)) != self._seen
        return self._in_flight or self._ticked or moved

    def ticked(self) -> None:
        """What the guard wrote on Nodes is the world's before its next step (on the
        simulator's API the world reads the guard's writes from its own store)."""
        self.carried.pull_node_marks()
        self._ticked = True

    def step(self) -> None:
        played = self.carried.played
        self._pace(played.now)
        self.carried.sync()
        self.syncs += 1
        self._seen = (played.store.resource_version, len(played.timeline))
        if self._ticked or self._in_flight:  # only the guard's tick creates a Job
            self._in_flight = self._jobs_in_flight()
        self._ticked = False
        if not self._in_flight:
            self._paced_from = None

    def _pace(self, now: datetime) -> None:
        if not self._in_flight:
            return
        if self._paced_from is None:
            self._paced_from = (now, time.monotonic())
            return
        began, wall = self._paced_from
        wait = wall + (now - began).total_seconds() / self.speed - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def _jobs_in_flight(self) -> bool:
        _, listed = self.plane.request(
            "GET", f"/apis/batch/v1/namespaces/{chart.NAMESPACE}/jobs"
        )
        items: list[dict[str, Any]] = listed.get("items", []) if isinstance(listed, dict) else []
        return any(not _finished(job) for job in items)


def _finished(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") in _TERMINAL and c.get("status") == "True" for c in conditions)


@dataclass
class RealCaughtUp:
    """Before the guard reads: its watch caches hold the newest Node and unfinished Pod the
    real API server has (their resourceVersions are etcd revisions, compared as integers).
    Asked only when something could have been written since: the kubelets were carried over,
    or an agent read a kernel log that grew (and may have patched its Node)."""

    plane: cluster.ControlPlane
    kubelets: PacedKubelets
    _waited_for: tuple[object, ...] | None = None

    def wait(self, cluster_reads: watched_cluster.WatchedCluster) -> None:
        played = self.kubelets.carried.played
        moved = (self.kubelets.syncs, *((n.boot_id, len(n.kernel_log)) for n in played.nodes))
        if moved == self._waited_for:
            return
        self._wait(cluster_reads)
        self._waited_for = moved

    def _wait(self, cluster_reads: watched_cluster.WatchedCluster) -> None:
        nodes = self._newest("/api/v1/nodes")
        pods = self._newest(
            "/api/v1/pods?fieldSelector=status.phase!%3DSucceeded,status.phase!%3DFailed"
        )
        if not cluster_reads.holds(nodes, pods, guard_reads.CATCH_UP_S):
            states = ", ".join(f"{s.resource} at {s.resource_version or 'nothing'}"
                               for s in cluster_reads.states())  # fmt: skip
            raise guard_reads.DemoError(f"watch caches did not reach Nodes {nodes}, Pods "
                                        f"{pods} within {guard_reads.CATCH_UP_S:.0f}s "
                                        f"({states})")  # fmt: skip

    def _newest(self, path: str) -> str:
        _, listed = self.plane.request("GET", path)
        items = listed.get("items", []) if isinstance(listed, dict) else []
        versions = [int(i["metadata"]["resourceVersion"]) for i in items]
        return str(max(versions, default=0))
