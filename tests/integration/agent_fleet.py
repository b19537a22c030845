"""A simulated GPU fleet with every part of the fast path real and running at once, on the
wall clock (docs/design.md#fast-path): the simulator's Kubernetes API over HTTP with a Lease,
its own Prometheus API answering the guard's queries for the fleet (a healthy one until the
world is told otherwise), a host tree per node with its kernel log, the real node agent on
every node (its follower thread polling the kernel log, its condition reporter patching the
Node's status with lightkube), and the controller's loop built as ``gpuguard run`` builds it
(``wiring.build_guard`` with the watch caches and the fast path's wake, the Lease elector,
``Runner.run`` in a thread).

``AgentFleet.fall_off_bus`` makes a GPU fall off the bus as the world would: its PCI config
space turns to all ones (unless ``card_answers``), then the driver's Xid 79 and "fallen off
the bus" lines reach ``/var/log/kern.log``. ``NodeWatch`` notes, with ``time.monotonic()``,
when the API server stored each Node change, so a caller can time line → condition →
cordon. The integration tests and ``bench/fast_path_bench.py`` share it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import lightkube

from gpuguard.agent import daemon, journal, node_status
from gpuguard.controller import fast_path, leader, runner, telemetry, tick, wiring
from gpuguard.demo import live_prometheus
from gpuguard.model import node_conditions as nc
from gpuguard.model import settings as settings_model
from gpuguard.sim import hosts, kernel_lines, kubeapi, live, scenario, state, store

WAIT_S = 60.0  # an upper bound for each step (a loaded 2-core CI machine); callers wait on events
HELD_S = 4 * WAIT_S  # a held pass waits out every wait its block may make (``held``)
CATCH_UP_S = 1.0  # how often the world is stepped to the wall clock (Prometheus stays fresh)


@dataclass(frozen=True)
class Seen:
    """One Node change as the API server stored it."""

    at: float  # time.monotonic() when the store held it
    node: str
    obj: store.Obj


class NodeWatch:
    """Every Node change the store accepts, noted as it happens (a thread on the store's own
    change feed: no polling, no HTTP in the way)."""

    def __init__(self, objects: store.ObjectStore) -> None:
        self._store = objects
        self._seen: list[Seen] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)
        self._version = objects.resource_version
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            changes, self._version = self._store.changes_after(self._version, 0.5)
            now = time.monotonic()
            found = [Seen(now, c.object["metadata"]["name"], c.object)
                     for c in changes if c.kind == "Node"]  # fmt: skip
            if found:
                with self._changed:
                    self._seen.extend(found)
                    self._changed.notify_all()

    def first(
        self, node: str, match: Callable[[store.Obj], bool], after: float, timeout_s: float
    ) -> float | None:
        """When ``node`` was first stored (after ``after``) in a state ``match`` accepts."""
        def found() -> float | None:
            return next((s.at for s in self._seen
                         if s.node == node and s.at >= after and match(s.obj)), None)  # fmt: skip

        with self._changed:
            self._changed.wait_for(lambda: found() is not None, timeout_s)
            return found()

    def close(self) -> None:
        self._stop.set()
        self._store.wake_watchers()
        self._thread.join(WAIT_S)


def condition(obj: store.Obj, kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", [])
                 if c.get("type") == kind), None)  # fmt: skip


def gone_from_bus(obj: store.Obj) -> bool:
    fallen = condition(obj, nc.GPU_FALLEN_OFF_BUS)
    return fallen is not None and fallen["status"] == "True" and (
        fallen.get("reason") == nc.GONE_FROM_BUS)


def said_fallen_off(obj: store.Obj) -> bool:
    fallen = condition(obj, nc.GPU_FALLEN_OFF_BUS)
    return fallen is not None and fallen["status"] == "True"


def cordoned(obj: store.Obj) -> bool:
    return bool(obj.get("spec", {}).get("unschedulable"))


TickDone = Callable[[tick.TickResult, bool], bool]  # a tick's result, and whether a wake made it


def saw_gone_from_bus(node: str) -> TickDone:
    """A tick whose snapshot held ``node`` carrying the agent's gone-from-bus condition."""
    def done(result: tick.TickResult, _urgent: bool) -> bool:
        nodes = result.snapshot.nodes if result.snapshot is not None else ()
        return any(n.name == node and nc.unambiguous_fault(n.gpu_conditions) for n in nodes)

    return done


def hourly(**isolation: Any) -> settings_model.GuardSettings:
    """Default settings but a tick an hour apart: what happens within a test came from a
    wake. ``isolation`` changes the isolation (breaker) settings."""
    return settings_model.GuardSettings(
        controller=settings_model.ControllerSettings(interval=timedelta(hours=1)),
        isolation=settings_model.IsolationSettings(**isolation),
    )


class AnnouncingRunner(runner.Runner):
    """``gpuguard run``'s loop, each pass that ticked announced with whether a wake made it
    (callers wait on it, not on time), each wake noted with its time. Nothing else differs."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.ticks: list[tuple[tick.TickResult, bool]] = []
        self.ticked = threading.Condition()
        self.woken: list[tuple[float, str]] = []  # (time.monotonic(), node) of each wake
        self.gate = threading.Condition()  # where a pass waits while ``held``
        self.holding = False  # set: the loop waits at the gate before its next pass
        self.at_gate = False  # the loop waits at the gate now

    def wake(self, node: str, why: str) -> None:
        with self.ticked:
            self.woken.append((time.monotonic(), node))
            self.ticked.notify_all()
        super().wake(node, why)

    def woken_for(self, node: str, after: float) -> float | None:
        """When the controller's watch first woke the loop for ``node`` after ``after``."""
        return next((at for at, name in list(self.woken) if name == node and at >= after), None)

    def wait_woken(self, node: str, after: float, timeout_s: float = WAIT_S) -> float | None:
        """``woken_for``, waiting up to ``timeout_s`` for the wake."""
        with self.ticked:
            self.ticked.wait_for(lambda: self.woken_for(node, after) is not None, timeout_s)
            return self.woken_for(node, after)

    @contextmanager
    def held(self) -> Iterator[None]:
        """The loop waits before its next pass while the block runs, as behind a slow tick:
        the wakes that arrive meanwhile are that one pass's tick. The block starts once the
        loop waits at the gate: a pass already under way (renewing the Lease) would otherwise
        take the first wake alone."""
        with self.gate:
            self.holding = True
            self.interrupt()  # the loop's next pass now, rather than a retry period later
            parked = self.gate.wait_for(lambda: self.at_gate, WAIT_S)
        try:
            assert parked, f"the loop did not come to the gate within {WAIT_S:.0f} s"
            yield
        finally:
            with self.gate:
                self.holding = False
                self.gate.notify_all()

    def step(self) -> tick.TickResult | None:
        with self.gate:
            self.at_gate = True
            self.gate.notify_all()
            self.gate.wait_for(lambda: not self.holding, HELD_S)
            self.at_gate = False
        urgent_before = self.urgent_ticks()
        result = super().step()
        if result is not None:
            with self.ticked:
                self.ticks.append((result, self.urgent_ticks() > urgent_before))
                self.ticked.notify_all()
        return result

    def urgent_ticks(self) -> float:
        return self.counter("gpuguard_urgent_ticks_total")

    def counter(self, name: str) -> float:
        return self.metrics.registry.get_sample_value(name) or 0.0

    def wait_for_tick(
        self, done: TickDone, timeout_s: float = WAIT_S
    ) -> tuple[tick.TickResult, bool] | None:
        """The first tick (announced so far or to come) that ``done`` accepts."""
        def found() -> tuple[tick.TickResult, bool] | None:
            return next((t for t in self.ticks if done(*t)), None)

        with self.ticked:
            self.ticked.wait_for(lambda: found() is not None, timeout_s)
            return found()


@dataclass
class AgentFleet:
    cluster: live.LiveCluster
    hosts_root: Path
    agents: dict[str, daemon.Agent]
    loop: AnnouncingRunner
    guard: tick.Guard
    watch: NodeWatch
    node_names: list[str] = field(default_factory=list)

    @property
    def objects(self) -> store.ObjectStore:
        return self.cluster.world.store

    def node(self, name: str) -> store.Obj:
        return self.objects.get("Node", "", name)

    def fall_off_bus(self, node_name: str, gpu_index: int = 4, *, card_answers: bool = False
                     ) -> float:  # fmt: skip
        """The GPU falls off the bus: its config space reads all ones (unless
        ``card_answers``), then the kernel's lines reach the log; when the lines were written
        (``time.monotonic()``)."""
        with self.cluster.lock:  # the world is not stepped meanwhile
            node = self.cluster.world.node(node_name)
            gpu = node.gpus[gpu_index]
            if not card_answers:
                gpu.on_bus = False
                config = self.hosts_root / node.name / "sys/bus/pci/devices" / gpu.pci / "config"
                config.write_bytes(hosts.config_space(gpu))
            lines = kernel_lines.stamp(
                [kernel_lines.gpu_at(gpu.pci, gpu.uuid), kernel_lines.xid(gpu.pci, 79),
                 *kernel_lines.fallen_off_bus(gpu.pci, hosts.device_id(gpu.model))],
                node.name, datetime.now(UTC), timedelta(hours=5),
            )  # fmt: skip
            node.kernel_log.extend(lines)
            with (self.hosts_root / node.name / "var/log/kern.log").open("a") as log:
                log.write("".join(line + "\n" for line in lines))
                log.flush()
                return time.monotonic()


def fleet_scenario(nodes: int, gpus: int) -> scenario.Scenario:
    return scenario.from_mapping(
        {
            "name": "fast-path-live",
            "start": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "duration": "24h",
            "fleet": {"nodes": [f"gpu-{i:03}" for i in range(nodes)], "gpus_per_node": gpus,
                      "model": "NVIDIA H100 80GB HBM3", "driver": "580.126.09"},
            "events": [],
        },
        source="agent_fleet",
    )  # fmt: skip


@contextmanager
def running(
    workdir: Path,
    *,
    nodes: int = 4,
    gpus: int = 8,
    guard_settings: settings_model.GuardSettings | None = None,
    ready_within_s: float = WAIT_S,
) -> Iterator[AgentFleet]:
    """The fleet, its agents and the controller, all running; stopped in reverse on exit.
    Yields once the loop's first tick succeeded (every node seen), within
    ``ready_within_s``."""
    chosen = guard_settings or settings_model.GuardSettings()
    emulation = live_prometheus.answers_for(chosen, 1.0)
    with ExitStack() as stack:
        cluster = stack.enter_context(live.serve(
            fleet_scenario(nodes, gpus), workdir, prefer_emulation=True, emulation=emulation,
        ))  # fmt: skip
        stop = threading.Event()
        _thread(stack, lambda: _keep_up(cluster, stop), "world", stop)
        hosts_root = workdir / "hosts"
        agents = {n.name: _agent(stack, cluster, n, hosts_root, workdir / "state", stop)
                  for n in cluster.world.nodes}  # fmt: skip
        watch = NodeWatch(cluster.world.store)
        stack.callback(watch.close)
        loop, guard = _controller(stack, cluster, chosen, stop)
        fleet = AgentFleet(cluster, hosts_root, agents, loop, guard, watch,
                           [n.name for n in cluster.world.nodes])  # fmt: skip
        first = loop.wait_for_tick(lambda result, _: result.ok, ready_within_s)
        assert first is not None, f"no tick succeeded within {ready_within_s:.0f} s: {loop.ticks}"
        yield fleet


def _thread(
    stack: ExitStack, target: Callable[[], None], name: str, stop: threading.Event
) -> None:
    """``target`` in a thread that ends once ``stop`` is set: on exit, set it and join."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    stack.callback(thread.join, WAIT_S)
    stack.callback(stop.set)


def _keep_up(cluster: live.LiveCluster, stop: threading.Event) -> None:
    while not stop.wait(CATCH_UP_S):
        cluster.catch_up()


def _agent(
    stack: ExitStack,
    cluster: live.LiveCluster,
    node: state.SimNode,
    hosts_root: Path,
    state_root: Path,
    stop: threading.Event,
) -> daemon.Agent:
    """The node's agent as the DaemonSet runs it: its own API client and token-less config
    (the simulator's API asks for none), the default 1 s poll."""
    root = hosts.write_host_tree(node, hosts_root)
    config = daemon.AgentConfig(node.name, root, state_root / node.name)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    client = stack.enter_context(lightkube.Client(
        config=kubeapi.lightkube_config(cluster.kubernetes),
        field_manager=node_status.FIELD_MANAGER, timeout=httpx2.Timeout(node_status.TIMEOUT_S),
    ))  # fmt: skip
    reporter = node_status.ConditionReporter(
        node_status.lightkube_patch(client, node.name), config.state_dir
    )
    log = root / "var/log/kern.log"
    agent = daemon.Agent(
        config, lambda saved: journal.FileFollower(log, saved), list, reporter=reporter
    )
    _thread(stack, lambda: agent.run(stop), f"agent-{node.name}", stop)
    return agent


def _controller(
    stack: ExitStack,
    cluster: live.LiveCluster,
    chosen: settings_model.GuardSettings,
    stop: threading.Event,
) -> tuple[AnnouncingRunner, tick.Guard]:
    """What ``gpuguard run`` builds (cli/run.py), its loop in a thread."""
    c = chosen.controller
    connection = wiring.Connection(kube_server=cluster.kubernetes,
                                   prometheus_url=cluster.prometheus)  # fmt: skip
    fast = fast_path.FastPath()
    built, client = stack.enter_context(
        wiring.build_guard(chosen, connection, dry_run=False, fast=fast)
    )
    elector = leader.LeaseElector(
        leader.KubeLeases(client, c.lease_name, c.namespace),
        identity="gpuguard-0",
        lease_duration=c.lease_duration,
        renew_deadline=c.renew_deadline,
        retry_period=c.renew_every,
    )
    metrics = telemetry.GuardMetrics()
    guard = dataclasses.replace(built, is_leader=runner.WriteGate(elector, metrics))
    loop = AnnouncingRunner(guard, elector, metrics, interval=c.interval, retry=c.renew_every)
    stack.enter_context(
        fast_path.watching(built.cluster, fast, loop.wake, metrics, c.interval, stop)
    )
    _thread(stack, lambda: loop.run(stop), "controller", stop)
    stack.callback(loop.interrupt)  # on exit: after the stop is set, the loop's wait ends
    stack.callback(stop.set)
    return loop, guard
