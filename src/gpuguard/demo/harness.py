"""Play a scenario with the guard ticking against it, and score what the guard did.

The world steps every 15 s; the world's Prometheus records changes at the next scrape; the
guard ticks every 30 s (its default) through lightkube over real HTTP to the simulator's API.
To play weeks in seconds, ticks are skipped while nothing can change the guard's mind: a
tick runs only within the hold window (+2 min) after a change in the world, and around the
Xid lookback later (when the gauge's 24 h-ago value turns over). Skipped ticks would have
read the same inputs and decided the same as the last one.

The guard reads the cluster as ``gpuguard run`` does (``demo.guard_reads``): watch caches
over HTTP, caught up with the world before every tick. The fast path
(docs/design.md#fast-path): after each step the agents whose kernel log grew read it and
write their node conditions; when the product's ``FastPath`` sees a node's conditions become
newly urgent through the watch, it wakes the guard, which ticks at once, its clock reading
the step's time plus the agent's poll interval (the follower reads at most that late), while
the world keeps its 15 s step grid.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import lightkube

from gpuguard.actuators import eviction, jobs, ledger, workload_events
from gpuguard.agent import node_status as agent_status
from gpuguard.catalog import xid as xid_catalog
from gpuguard.clients import kube
from gpuguard.controller import change as change_step
from gpuguard.controller import (
    fast_path,
    fault_history,
    fleet_health,
    recovery,
    remediation,
    return_to_pool,
    telemetry,
    tick,
    wiring,
)
from gpuguard.demo import agents, guard_reads, host_checks, job_commands
from gpuguard.demo import findings as demo_findings
from gpuguard.demo import rollouts as rollout_view
from gpuguard.model import (
    annotation_keys,
    decisions,
    faults,
    fleet,
    ports,
)
from gpuguard.model import remediation as model_remediation
from gpuguard.model import return_to_pool as return_model
from gpuguard.model import settings as settings_model
from gpuguard.policy import escalation
from gpuguard.sim import (
    bmc,
    kubeapi,
    kubelet,
    prometheus_view,
    reactions,
    return_view,
    scenario,
    state,
    store,
    world,
)
from gpuguard.sim import clock as simclock
from gpuguard.sources import changes, kubernetes, reset_cards, watched_cluster

STEP = timedelta(seconds=15)
MARGIN = timedelta(minutes=2)


@dataclass
class ScenarioRun:
    """What happened in one scenario with the guard attached."""

    spec: scenario.Scenario
    played: world.World
    isolated_at: dict[str, datetime] = field(default_factory=dict)
    guard_timeline: list[dict[str, Any]] = field(default_factory=list)
    gpu_seconds_out: float = 0.0
    ticks: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)  # phantom GPUs at the end
    verdicts: dict[str, list[str]] = field(default_factory=dict)
    returned_at: dict[str, list[datetime]] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)  # still isolated at the end: why
    ledger: list[dict[str, Any]] = field(default_factory=list)  # lines as they were written
    cards: dict[str, dict[str, Any]] = field(default_factory=dict)  # each card's final history
    withheld: list[dict[str, Any]] = field(default_factory=list)  # pending faults at the end
    trips: list[dict[str, Any]] = field(default_factory=list)  # when the breaker tripped
    gpu_isolated_at: dict[str, datetime] = field(default_factory=dict)  # node/index -> first
    gpu_isolated: list[dict[str, Any]] = field(default_factory=list)  # still out at the end
    healthy_gpu_seconds_out: float = 0.0  # healthy GPUs made unavailable by gpuguard
    rollouts: list[dict[str, Any]] = field(default_factory=list)  # declared changes (demo.rollouts)
    rollout_watch: rollout_view.Watch = field(default_factory=rollout_view.Watch)
    woken_ticks: int = 0  # ticks the fast path woke
    fallback_lists: int = 0  # ticks that listed because a watch cache was not fresh
    waited: set[str] = field(default_factory=set)  # nodes that waited for a repair's turn


class _AgentClients:
    """A client per agent identity (one for all on the simulator's API; each node's own on a
    real one), made when an agent first writes; closed together."""

    def __init__(self, config_for: Callable[[str], lightkube.KubeConfig]) -> None:
        self._config_for = config_for
        self._clients: dict[int, lightkube.Client] = {}

    def get(self, node: str) -> lightkube.Client:
        config = self._config_for(node)
        if id(config) not in self._clients:
            self._clients[id(config)] = kube.client(config, agent_status.FIELD_MANAGER)
        return self._clients[id(config)]

    def __enter__(self) -> _AgentClients:
        return self

    def __exit__(self, *_: object) -> None:
        for client in self._clients.values():
            client.close()


@dataclass
class _Activity:
    """When ticks can matter: windows after each change point."""

    hold: timedelta
    lookback: timedelta
    windows: list[tuple[datetime, datetime]] = field(default_factory=list)

    def mark(self, when: datetime) -> None:
        self.windows.append((when, when + self.hold + MARGIN))
        self.windows.append((when + self.lookback, when + self.lookback + MARGIN))

    def active(self, when: datetime) -> bool:
        self.windows = [w for w in self.windows if w[1] >= when]
        return any(start <= when for start, _ in self.windows)


# The host trees and the agents' saved state are scratch that dies with the run: memory-backed
# where the machine has it, so the agents' fsync of their position (as on a real node) and the
# trees' many small files cost no disk flushes.
_SCRATCH = Path("/dev/shm")


Observer = Callable[[world.World], None]


class Kubelets(Protocol):
    """What runs gpuguard's Jobs on the simulated nodes: the simulator's own Job controller and
    kubelets (``sim.kubelet.JobKubelet``), or a real control plane's Job controller with the
    simulator's kubelets (``demo.real_plane``)."""

    def due(self, now: datetime) -> bool: ...
    def step(self) -> None: ...
    def ticked(self) -> None: ...  # the guard wrote: its marks are the world's at the next step


@dataclass
class _OwnKubelets:
    """The simulator's Job controller and kubelets; the guard writes to the world's own store,
    so what it wrote is a change the next step sees without being carried."""

    jobs: kubelet.JobKubelet

    def due(self, now: datetime) -> bool:
        return self.jobs.due(now)

    def step(self) -> None:
        self.jobs.step()

    def ticked(self) -> None:
        pass


class CatchUp(Protocol):
    def wait(self, cluster: watched_cluster.WatchedCluster) -> None: ...


@dataclass(frozen=True)
class Api:
    """The Kubernetes API the guard and the agents talk to, and who runs gpuguard's Jobs."""

    guard: lightkube.KubeConfig
    agent: Callable[[str], lightkube.KubeConfig]  # each node's agent's
    kubelets: Kubelets
    caught_up: CatchUp
    # the guard's watches end when this API server stops at the end of the run (a real one
    # outlives it: a watch blocked on its quiet stream ends with the process, watch_cache.stop)
    stops_with_run: bool = True


ApiFactory = Callable[
    [world.World, Path, settings_model.GuardSettings], AbstractContextManager[Api]
]


@contextmanager
def in_process_api(
    played: world.World, hosts: Path, settings: settings_model.GuardSettings
) -> Iterator[Api]:
    """The simulator's own API over HTTP (``sim.kubeapi``), its Job controller and kubelets."""
    jobs_kubelet = kubelet.JobKubelet(played, job_commands.runner(
        played, hosts, settings.controller.xid_overrides))  # fmt: skip
    with kubeapi.serve(played.store) as server:
        config = kubeapi.lightkube_config(server.url)
        yield Api(config, lambda _: config, _OwnKubelets(jobs_kubelet),
                  guard_reads.CaughtUp(played.store))


def play(
    spec: scenario.Scenario,
    settings: settings_model.GuardSettings,
    *,
    observe: Observer | None = None,
    api: ApiFactory = in_process_api,
) -> ScenarioRun:
    """Play ``spec`` with the guard attached; ``observe`` (if given) sees the world at its
    start and after every step (e.g. to record what a Prometheus would have scraped); ``api``:
    the Kubernetes API under it all (the simulator's own unless a test brings a real one)."""
    scratch = _SCRATCH if os.access(_SCRATCH, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="gpuguard-demo-hosts-", dir=scratch) as hosts:
        return _play(spec, settings, Path(hosts), observe, api)


def _play(
    spec: scenario.Scenario,
    settings: settings_model.GuardSettings,
    hosts: Path,
    observe: Observer | None = None,
    api: ApiFactory = in_process_api,
) -> ScenarioRun:
    clock = simclock.SimClock(spec.start)
    objects = store.ObjectStore(now=clock.now)
    played = world.World.from_scenario(spec, objects, clock, hosts_root=hosts)
    run = ScenarioRun(spec, played)
    isolation = settings.isolation
    view = prometheus_view.WorldPrometheus(played, isolation.hold_window, isolation.xid_lookback)
    node_agents = agents.NodeAgents(played, hosts, hosts / ".agent-state")
    view.targets.append(node_agents.scrape)
    guard_clock = _GuardClock(clock)
    fast, wakes = fast_path.FastPath(), guard_reads.Wakes()
    with api(played, hosts, settings) as served, kube.client(
        served.guard, annotation_keys.FIELD_MANAGER
    ) as client, _AgentClients(served.agent) as agent_clients:
        node_agents.client_for = agent_clients.get
        reads = wiring.cluster_reads(client, settings, fast)
        writer = reads.writer
        catalog = xid_catalog.load_catalog(settings.controller.xid_overrides)
        namespace = settings.controller.namespace
        fault_ledger = wiring.shared_ledger(client, namespace)
        guard = tick.Guard(
            metrics=view,
            pods_on_gpus=view,
            cluster=reads.cluster,
            writer=writer,
            classifier=catalog,
            settings=settings,
            clock=guard_clock,
            ledger=fault_ledger,
            recovery=recovery.Recovery(
                jobs=jobs.Jobs(client, namespace),
                ledger=fault_ledger,
                writer=writer,
                catalog=catalog,
                image=settings.controller.image,
                namespace=namespace,
                runtime_class=settings.controller.job_runtime_class,
                merge_window=escalation.merge_window_for(isolation.hold_window),
                evidence_deadline=settings.controller.evidence_deadline,
                lookback=isolation.xid_lookback,
            ),
            return_to_pool=return_to_pool.ReturnToPool(
                jobs=jobs.Jobs(client, namespace),
                ledger=fault_ledger,
                writer=writer,
                facts=return_view.WorldReturnFacts(played),
                classifier=catalog,
                settings=settings,
                image=settings.controller.image,
                namespace=namespace,
            ),
            history=fault_history.FaultHistory(
                fault_ledger,
                catalog,
                isolation.xid_lookback,
                writer,
                merge_window=escalation.merge_window_for(isolation.hold_window),
            ),
            gpu_isolation=wiring.gpu_isolation_step(
                client, writer, catalog, settings, namespace=namespace, fault_ledger=fault_ledger
            ),
            changes=change_step.Changes(
                source=changes.ChangeReader(client, namespace),
                writer=writer,
                checks=host_checks.HostChecks(played, hosts),
                jobs=jobs.Jobs(client, namespace),
                image=settings.controller.image,
                kured=changes.KuredLock(client),
                limits=settings.changes,
                namespace=namespace,
                runtime_class=settings.controller.job_runtime_class,
                templates=changes.JobTemplates(client, settings.controller.change_templates),
                burnin_deadline=settings.return_to_pool.burnin_deadline,
            ),
            # opt-in repairs (docs/remediation.md): the simulated nodes' BMCs (sim.bmc)
            remediation=_remediation(played, client, writer, settings, fault_ledger),
            # the gang check with its Events on the owners, over HTTP like the real guard; the
            # interconnect and topology checks run once at the end (demo.findings), not per tick
            fleet_health=fleet_health.FleetHealthWatch(
                pods=reads.workload_pods,
                metrics=None,
                settings=settings.fleet,
                events=workload_events.WorkloadEvents(client),
            ),
        )
        urgent = _Urgent(node_agents, guard_clock, reads.cluster, wakes, served.caught_up)
        try:
            with fast_path.watching(
                reads.cluster, fast, wakes.wake, telemetry.GuardMetrics(),
                settings.controller.interval,
            ):
                urgent.started()
                _drive(run, guard, view, settings, served.kubelets, observe, urgent)
        finally:
            node_agents.close()
        run.cards = _cards(ledger.Ledger(client, namespace).entries().entries)
    _ended(reads.cluster, run, served.stops_with_run)
    run.withheld = _withheld(run)
    run.rollouts = run.rollout_watch.report()
    run.gpu_isolated = _gpu_isolated(run)
    return run


def _marked_node(obj: dict[str, Any]) -> fleet.Node:
    meta = obj["metadata"]
    return fleet.Node(meta["name"], "", 0, 0, annotations=meta.get("annotations") or {})


def _gpu_isolated(run: ScenarioRun) -> list[dict[str, Any]]:
    """The GPUs gpuguard holds out at the end, from their nodes' marks."""
    return [
        {"node": node.name, "gpu": entry.index, "uuid": entry.uuid, "mechanism": entry.mechanism}
        for node in map(_marked_node, run.played.store.list("Node"))
        for entry in node.marks.gpus
    ]


def _cards(entries: list[faults.LedgerEntry]) -> dict[str, dict[str, Any]]:
    """Each card's history as the ledger holds it at the end: confirmed faults (what
    escalation counts), all lines, and the escalation they lead to."""
    out = {}
    for uuid in sorted({e.uuid for e in entries if e.uuid}):
        last = max((e for e in entries if e.uuid == uuid), key=lambda e: e.at)
        history = escalation.history_for(entries, uuid, last.node, last.pci)
        out[uuid] = {
            "lines": sum(1 for e in entries if e.uuid == uuid),
            "confirmed_faults": len(history.card_faults),
            "escalation": str(escalation.escalate(history)),
        }
    return out


def _withheld(run: ScenarioRun) -> list[dict[str, Any]]:
    out = []
    for node in run.played.store.list("Node"):
        meta = node["metadata"]
        mark = fleet.Node(
            meta["name"], "", 0, 0, annotations=meta.get("annotations") or {}
        ).marks.withheld
        if mark is not None:
            since = (mark.since - run.played.origin).total_seconds()
            out.append({"node": meta["name"], "reason": str(mark.reason), "since": since,
                        "fault": mark.fault})
    return out


@dataclass
class _GuardClock:
    """The guard's clock: the world's, plus ``offset`` during a fast-path step."""

    world: simclock.SimClock
    offset: timedelta = timedelta(0)

    def now(self) -> datetime:
        return self.world.now() + self.offset


@dataclass
class _Urgent:
    """After each step: the agents read, the guard's caches catch up with the world, and
    whether the product's fast path woke the guard. The guard's clock reads the step's time
    plus the poll interval for the rest of a woken step."""

    agents: agents.NodeAgents
    clock: _GuardClock
    cluster: kubernetes.KubernetesReader | watched_cluster.WatchedCluster
    wakes: guard_reads.Wakes
    caught_up: CatchUp
    woken: int = 0

    def started(self) -> None:
        """The caches listed before the world's first step (a first list wakes nothing)."""
        if isinstance(self.cluster, watched_cluster.WatchedCluster) and not (
            self.cluster.wait_synced(0.0)
        ):
            raise guard_reads.DemoError("watch caches of the simulator's API not synced "
                                        "within the guard's interval")  # fmt: skip

    def catch_up(self) -> None:
        """Before the guard reads: its caches hold the world as it is now."""
        if isinstance(self.cluster, watched_cluster.WatchedCluster):
            self.caught_up.wait(self.cluster)

    def after_step(self) -> bool:
        self.clock.offset = timedelta(0)
        self.agents.follow()
        self.catch_up()
        urgent = self.wakes.take()
        if urgent:
            self.woken += 1
            self.clock.offset = timedelta(seconds=agents.POLL_INTERVAL_S)
        return urgent


def _ended(
    cluster: kubernetes.KubernetesReader | watched_cluster.WatchedCluster,
    run: ScenarioRun,
    server_stopped: bool,
) -> None:
    """The watch threads ended with the simulator's API server (DemoError if not)."""
    if not isinstance(cluster, watched_cluster.WatchedCluster):
        return
    run.fallback_lists = cluster.fallback_lists
    if server_stopped and not cluster.join(guard_reads.JOIN_S):
        raise guard_reads.DemoError(f"watch threads still running {guard_reads.JOIN_S:.0f}s "
                                    "after the API server stopped")  # fmt: skip


def _drive(
    run: ScenarioRun,
    guard: tick.Guard,
    view: prometheus_view.WorldPrometheus,
    settings: settings_model.GuardSettings,
    jobs_kubelet: Kubelets,
    observe: Observer | None = None,
    fast: _Urgent | None = None,
) -> None:
    played, objects = run.played, run.played.store
    activity = _Activity(settings.isolation.hold_window, settings.isolation.xid_lookback)
    interval = settings.controller.interval
    seen: tuple[int, int] | None = None
    last = played.now
    out = healthy = 0
    findings: Shown = {}

    def on_step(w: world.World) -> None:
        nonlocal seen, last, out, healthy
        run.gpu_seconds_out += out * (w.now - last).total_seconds()
        run.healthy_gpu_seconds_out += healthy * (w.now - last).total_seconds()
        last = w.now
        if jobs_kubelet.due(w.now):  # a run time, deadline or TTL passed between ticks
            jobs_kubelet.step()
        urgent = fast is not None and fast.after_step()
        current = (objects.resource_version, len(w.timeline))
        if current != seen:
            view.scrape(found_after=prometheus_view.SCRAPE)
            activity.mark(w.now)
            out, healthy = _gpus_out(w)
            seen = current
        if observe is not None:
            observe(w)
        if urgent or (w.elapsed % interval == timedelta(0) and activity.active(w.now)):
            jobs_kubelet.step()
            if fast is not None:
                fast.catch_up()
            _tick(run, guard, findings)  # its writes show up as a change at the next step
            jobs_kubelet.ticked()

    view.scrape(found_after=prometheus_view.SCRAPE)
    if observe is not None:
        observe(played)
    played.run(step=STEP, on_step=on_step)
    if fast is not None:
        run.woken_ticks = fast.woken
    run.findings = demo_findings.phantom_findings(view, settings.phantom, played.now)
    run.findings += demo_findings.fleet_health_findings(played, settings.fleet, played.now)


Shown = dict[tuple[str, str], decisions.Finding]


def _tick(run: ScenarioRun, guard: tick.Guard, findings: Shown) -> None:
    run.ticks += 1
    result = guard.tick()
    t = (result.at - run.played.origin).total_seconds()
    _record_recovery(run, result, t)
    _record_returns(run, result, t)
    _record_remediations(run, result, t)
    for entry in result.history.recorded:
        run.ledger.append(_line(entry, t))
    for action in result.history.escalated:
        run.guard_timeline.append(_entry(t, action.node, "escalated", action.reason, action.detail))
    if result.decision is not None and result.decision.breaker.tripped_now:
        run.trips.append({"at": t, "candidates": result.decision.breaker.candidates})
    for marking in result.marked:
        kind = "withheld" if marking.value is not None else "withheld_cleared"
        run.guard_timeline.append(_entry(t, marking.node, kind, marking.reason, marking.detail))
    run.rollout_watch.saw(result.changes, t, run.guard_timeline)
    for action in result.applied:
        if action.kind is decisions.ActionKind.ISOLATE_GPU:
            _record_gpu_isolation(run, action, result.at, t)
            continue
        run.isolated_at.setdefault(action.node, result.at)
        run.guard_timeline.append(_entry(t, action.node, "isolate", action.reason, action.detail))
    for outcome in result.gpus:
        if outcome.action is not None:
            kind = "isolate" if outcome.action.kind is decisions.ActionKind.ISOLATE else "gpu"
            if kind == "isolate":
                run.isolated_at.setdefault(outcome.node, result.at)
            run.guard_timeline.append(
                _entry(t, outcome.node, kind, outcome.action.reason, outcome.action.detail)
            )
    if result.error:
        run.guard_timeline.append(_entry(t, None, "guard_error", None, result.error))
    for step, failure in result.step_errors:
        run.guard_timeline.append(_entry(t, None, "guard_error", None, f"{step}: {failure}"))
    if result.decision is None and not result.silent:
        return  # nothing decided (Prometheus down): what was shown still stands
    told = result.decision.findings if result.decision is not None else ()
    current = {(f.node, str(f.reason)): f for f in (*told, *result.silent)}
    for key, finding in current.items():
        if key not in findings:  # shown once while it lasts
            detail = finding.detail or "; ".join(e.describe() for e in finding.evidence[:1])
            run.guard_timeline.append(
                _entry(t, finding.node, "guard_finding", finding.reason, detail)
            )
    findings.clear()
    findings.update(current)


def _record_gpu_isolation(
    run: ScenarioRun, action: decisions.Action, at: datetime, t: float
) -> None:
    node = fleet.Node(action.node, "", 0, 0, annotations=action.annotations)
    for entry in node.marks.gpus:
        run.gpu_isolated_at.setdefault(f"{action.node}/{entry.index}", at)
    run.guard_timeline.append(_entry(t, action.node, "isolate_gpu", action.reason, action.detail))


def _record_recovery(run: ScenarioRun, result: tick.TickResult, t: float) -> None:
    for step in result.recovery:
        if step.start_evidence_job:
            run.guard_timeline.append(
                _entry(t, step.node, "evidence_job", None, "evidence Job pinned to the node")
            )
        if step.verdict is None or step.annotations is None:
            continue
        run.verdicts.setdefault(step.node, []).append(str(step.verdict))
        if step.record is not None:
            run.ledger.append(_line(step.record, t, step.escalation))
        run.guard_timeline.append(
            _entry(t, step.node, "verdict", decisions.Reason.VERDICT_RECORDED, step.request)
        )


def _record_returns(run: ScenarioRun, result: tick.TickResult, t: float) -> None:
    for outcome in result.returns:
        decision = outcome.decision
        if decision.record is not None and outcome.done == "applied":
            run.ledger.append(_line(decision.record, t))
        if outcome.returned:
            run.returned_at.setdefault(decision.node, []).append(result.at)
            run.held.pop(decision.node, None)
            run.guard_timeline.append(
                _entry(t, decision.node, "return", decision.reason, decision.detail)
            )
        elif decision.step in _HOLDING:
            if run.held.get(decision.node) != decision.detail:
                run.guard_timeline.append(
                    _entry(t, decision.node, "return_check", decision.reason, decision.detail)
                )
            run.held[decision.node] = decision.detail


def _remediation(
    played: world.World,
    client: lightkube.Client,
    writer: Any,
    settings: settings_model.GuardSettings,
    fault_ledger: ports.LedgerWriter,
) -> remediation.Remediation | None:
    """The repairs step with the simulated BMCs, when a pool is opted in."""
    r, c = settings.remediation, settings.controller
    if not r.power_cycle_pools and not r.hand_off_pools and not r.gpu_reset_pools:
        return None
    power = bmc.SimBmc(played, r.bmc_timeout.total_seconds())
    return remediation.Remediation(
        power, eviction.Evictor(client), writer, r, hand_off=writer,
        ledger=fault_ledger, reset_jobs=jobs.Jobs(client, c.namespace),
        reset_job=remediation.ResetJob(c.image, c.namespace, c.job_runtime_class or None),
        cards=reset_cards.ResetCards(return_view.WorldResetCards(played)),
    )  # fmt: skip


def _record_remediations(run: ScenarioRun, result: tick.TickResult, t: float) -> None:
    """Each repair written, and each node's first wait for the breaker's turn."""
    for outcome in result.remediations:
        decision, mark = outcome.decision, outcome.result
        if mark is not None:
            reason = {
                model_remediation.Result.FAILED: decisions.Reason.REMEDIATION_FAILED,
                model_remediation.Result.PUBLISHED: decisions.Reason.REMEDIATION_HANDED_OFF,
                model_remediation.Result.STARTED: decisions.Reason.REMEDIATION_STARTED,
            }.get(mark.result, decisions.Reason.REMEDIATION_DONE)
            run.guard_timeline.append(_entry(t, decision.node, f"remediation_{mark.result}",
                                             reason, f"{mark.action}: {mark.detail}"))
        elif decision.step is remediation.Step.WAIT and decision.node not in run.waited:
            run.waited.add(decision.node)
            run.guard_timeline.append(_entry(t, decision.node, "remediation_wait",
                                             decisions.Reason.REMEDIATION_WAITING, decision.detail))
        elif decision.step is remediation.Step.DRAIN and outcome.done == "applied":
            draining = decisions.Reason.REMEDIATION_DRAINING
            run.guard_timeline.append(
                _entry(t, decision.node, "remediation_drain", draining, decision.detail))


_HOLDING = {
    return_model.ReturnStep.HOLD,
    return_model.ReturnStep.WAIT,
    return_model.ReturnStep.STAY_ISOLATED,
    return_model.ReturnStep.START_BURN_IN,
    return_model.ReturnStep.BURN_IN_RUNNING,
}


def _line(
    entry: faults.LedgerEntry, t: float, level: escalation.Escalation | None = None
) -> dict[str, Any]:
    return {
        "t": t,
        "node": entry.node,
        "xid": entry.xid,
        "fault": ledger.fault_token(entry),
        "kind": str(entry.kind),
        "pci": entry.pci,
        "uuid": entry.uuid,
        "recorder": str(entry.recorder),
        "verdict": str(entry.verdict) if entry.verdict else None,
        "confirmation": str(entry.confirmation),
        "escalation": str(level) if level else None,
    }


def _entry(
    t: float, node: str | None, kind: str, reason: decisions.Reason | None, detail: str
) -> dict[str, Any]:
    return {"t": t, "kind": kind, "node": node, "reason": str(reason) if reason else None,
            "detail": detail}


def _gpus_out(played: world.World) -> tuple[int, int]:
    """GPUs gpuguard holds out of service — every GPU of a node it cordoned (its annotation
    present), and the GPUs it isolated on serving nodes — and how many of those are healthy
    (no hardware fault ever, still on the bus: capacity lost to the isolation, not the fault)."""
    out = healthy = 0
    for obj in played.store.list("Node"):
        node = _marked_node(obj)
        sim = played.node(node.name)
        if obj.get("spec", {}).get("unschedulable") and node.marks.isolated_at is not None:
            gpus = [g for g in sim.gpus if g.registered]
        else:
            isolated = {e.uuid for e in node.marks.gpus}
            gpus = [g for g in sim.gpus if g.uuid in isolated]
        out += len(gpus)
        healthy += sum(1 for g in gpus if _healthy(g))
    return out, healthy


def _healthy(gpu: state.SimGpu) -> bool:
    return gpu.on_bus and all(
        code in reactions.DEVICE_PLUGIN_SKIPPED_XIDS for _, code in gpu.xid_history
    )
