"""The World: a fleet of simulated GPU nodes that reacts to a scenario's events over time.

The world is what gpuguard runs against in demos and tests; it holds no product logic. It
owns ``state.SimNode``/``SimGpu`` (what the exporters and host trees render) and keeps the
store's Node objects in step through ``sim.mirror`` — status only (capacity, allocatable,
bootID, conditions), by merge patches, so ``spec.unschedulable`` and annotations stay with
humans and gpuguard. Build the clock at the scenario's start (``SimClock(spec.start)``) so
timestamps match the seed's dates; offsets count from the clock's time at construction.

What each scenario event does (the world's rules) is in ``sim.reactions``; this module keeps
the state, moves time, schedules the reactions that fall due and mirrors changes out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from gpuguard.model import annotation_keys
from gpuguard.sim import (
    change_tool,
    dra,
    gpu_operator,
    hosts,
    kernel_lines,
    mirror,
    reactions,
    scenario,
    state,
    store,
)
from gpuguard.sim import clock as simclock

FAULT_KINDS = frozenset({"xid", "gpu_lost", "dbe", "sxid", "fabric", "gpu_recovery"})
INITIAL_UPTIME = timedelta(days=12)  # nodes have been up a while when a scenario starts
# Bus numbers of GPU slots by index (GPU 4 at 0000:99:00.0 as in the seed's fault ledger).
PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x99, 0xAB, 0xBA, 0xDB,
             0x19, 0x2B, 0x3B, 0x5E, 0x9A, 0xAC, 0xBB, 0xDC)

StepHook = Callable[["World"], None]


class World:
    """A scenario's fleet in motion. Build with ``World.from_scenario``."""

    def __init__(self, spec: scenario.Scenario, objects: store.ObjectStore,
                 clock: simclock.SimClock, hosts_root: Path | None = None) -> None:
        self.scenario = spec
        self.store = objects
        self.clock = clock
        self.hosts_root = hosts_root
        self.origin = clock.now()
        booted = self.origin - INITIAL_UPTIME
        self.nodes: list[state.SimNode] = [_sim_node(n, spec, booted) for n in spec.nodes]
        self.timeline: list[state.TimelineEntry] = []
        self._by_name = {n.name: n for n in self.nodes}
        self._pending = deque(spec.events)
        self.prometheus_down_until: datetime | None = None  # set by reactions.on_prometheus_down
        self._first_fault: dict[str, timedelta] = {}
        self._mirror = mirror.StoreMirror(objects, self.origin)
        self.memory = reactions.Memory()
        self._dirty_hosts: set[str] = set()
        self._labels_seen = -1

    @classmethod
    def from_scenario(cls, spec: scenario.Scenario, objects: store.ObjectStore,
                      clock: simclock.SimClock, hosts_root: Path | None = None) -> World:
        """Create the fleet, its Node and system Pod objects, and (optionally) host trees."""
        world = cls(spec, objects, clock, hosts_root)
        for index, node in enumerate(world.nodes):
            world._create_objects(node, index)
        world._write_hosts(set(world._by_name))
        return world

    # ---- what callers read -------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        return self.clock.now()

    @property
    def elapsed(self) -> timedelta:
        return self.clock.now() - self.origin

    @property
    def end(self) -> timedelta:
        return self.scenario.end

    @property
    def prometheus_up(self) -> bool:
        return self.prometheus_down_until is None

    def node(self, ref: str | int) -> state.SimNode:
        if isinstance(ref, int):
            return self.nodes[ref]
        try:
            return self._by_name[ref]
        except KeyError:
            raise KeyError(f"no node {ref!r} in the world") from None

    def first_fault_at(self, node: str) -> timedelta | None:
        """Offset of the node's first fault event (hardware-class Xid, gpu_lost, dbe)."""
        return self._first_fault.get(node)

    # ---- moving time -------------------------------------------------------------------------

    def step_to(self, offset: timedelta) -> None:
        """Apply every event and reaction due up to ``offset``, then set the clock there."""
        target = self.origin + offset
        if target < self.clock.now():
            raise ValueError(f"cannot step back to {offset} (now at {self.elapsed})")
        self._follow_labels()
        if self.memory.playbooks:  # a change was declared: its applying tool runs
            change_tool.follow(self, self.nodes)
        while (due := self._next_due()) is not None and due <= target:
            self.clock.advance_to(due)
            self._react()
            while self._pending and self.origin + self._pending[0].at <= due:
                self._apply(self._pending.popleft())
        self.clock.advance_to(target)
        self._write_hosts(self._dirty_hosts)

    def run(self, step: timedelta = timedelta(seconds=15), until: timedelta | None = None,
            on_step: StepHook | None = None) -> None:
        """Step through the scenario to ``until`` (default: its end), calling ``on_step``."""
        if step <= timedelta(0):
            raise ValueError("step must be positive")
        stop = self.scenario.end if until is None else until
        offset = self.elapsed
        while offset < stop:
            offset = min(offset + step, stop)
            self.step_to(offset)
            if on_step is not None:
                on_step(self)

    # ---- scheduling --------------------------------------------------------------------------

    def _next_due(self) -> datetime | None:
        times = [self.origin + self._pending[0].at] if self._pending else []
        times += self._reaction_times()
        return min(times, default=None)

    def _reaction_times(self) -> list[datetime]:
        times = [self.prometheus_down_until] if self.prometheus_down_until else []
        for node in self.nodes:
            times += [w.ends for w in node.workloads if w.ends is not None]
            times += [t for t in (node.down_until, node.allocatable_dip_until,
                                  node.exporter_down_until) if t is not None]
        return times

    def _react(self) -> None:
        """Reactions due now: workloads ending, boots completing, dips ending, Prometheus back."""
        now = self.clock.now()
        if self.prometheus_down_until is not None and self.prometheus_down_until <= now:
            self.prometheus_down_until = None
            self.record("prometheus_up", None, "Prometheus answers again")
        for node in self.nodes:
            for workload in [w for w in node.workloads if w.ends is not None and w.ends <= now]:
                reactions.finish_workload(self, node, workload)
            if node.down_until is not None and node.down_until <= now:
                reactions.boot_complete(self, node)
            if node.exporter_down_until is not None and node.exporter_down_until <= now:
                node.exporter_down_until = None
                self.record("exporter_up", node.name, "dcgm-exporter answers again")
            if node.allocatable_dip_until is not None and node.allocatable_dip_until <= now:
                node.allocatable_dip_until = None
                self.record("dip_end", node.name, f"allocatable back to {node.gpu_allocatable}")
                self.touch(node)

    def _apply(self, event: scenario.Event) -> None:
        if event.node is not None and event.kind in FAULT_KINDS and self._is_fault(event):
            self._first_fault.setdefault(event.node, event.at)
        reaction = reactions.REACTIONS[event.kind]
        reaction(self, event.payload, None if event.node is None else self._by_name[event.node])

    @staticmethod
    def _is_fault(event: scenario.Event) -> bool:
        payload = event.payload
        if isinstance(payload, scenario.SxidPayload):
            return payload.severity == "Fatal"
        if isinstance(payload, scenario.FabricPayload):
            return payload.state == "Not Started"
        return not (isinstance(payload, scenario.XidPayload)
                    and payload.xid in reactions.DEVICE_PLUGIN_SKIPPED_XIDS)

    # ---- what the reactions change besides the nodes ----------------------------------------

    def record(self, kind: str, node: str | None, detail: str) -> None:
        """Add an entry to the timeline at the current offset."""
        seconds = self.elapsed.total_seconds()
        self.timeline.append(state.TimelineEntry(t=seconds, kind=kind, node=node, detail=detail))

    def touch(self, node: state.SimNode) -> None:
        """The node changed: mirror it into the store now, rewrite its host tree after the step."""
        self._mirror.sync(node, self.clock.now())
        self._dirty_hosts.add(node.name)

    def set_ready(self, node: state.SimNode, ready: bool) -> None:
        if node.ready != ready:
            node.ready = ready
            self._mirror.readiness_changed(node.name, self.clock.now())

    def log_kernel(self, node: state.SimNode, lines: list[str], at: datetime | None = None) -> None:
        """Append ``lines`` to the node's kernel log, stamped at ``at`` (default: now)."""
        when = at or self.clock.now()
        uptime = when - (node.booted_at or self.origin)
        node.kernel_log.extend(kernel_lines.stamp(lines, node.name, when, uptime))

    def take_job_hang(self, node: str, kind: str) -> bool:
        """Whether a ``job_hang`` waits for this node's next Job of ``kind`` (used up here)."""
        if (node, kind) in self.memory.job_hangs:
            self.memory.job_hangs.discard((node, kind))
            return True
        return False

    def count_restart(self, node: str, component: str) -> None:
        """One more restart of a system pod (``dcgm-exporter``, ``device-plugin``) on ``node``."""
        self._mirror.restarted(node, component)

    def _follow_labels(self) -> None:
        """Node labels written since the last step move the node between the cluster's
        device-plugin DaemonSet and the chart's per-node instances (the cluster's has the
        affinity ``gpuguard.io/device-plugin DoesNotExist``; each of the chart's selects
        ``gpuguard.io/device-plugin=excluding`` and one ``gpuguard.io/device-plugin-visible``
        value, deploy/helm/gpuguard/templates/device-plugin.yaml). A value no instance has
        leaves the node without a plugin. On a GPU Operator node the operator's own plugin
        follows its operand label (sim/gpu_operator.py)."""
        if self.store.resource_version == self._labels_seen:
            return
        for node in self.nodes:
            labels = self.store.get("Node", "", node.name)["metadata"].get("labels") or {}
            operator_plugin = False
            if node.gpu_operator:
                labels = gpu_operator.relabel(self.store, node.name, labels)
                operator_plugin = gpu_operator.plugin_runs(labels)
                self._mirror.device_plugin_runs(node.name, operator_plugin, self.clock.now())
            value = labels.get(annotation_keys.DEVICE_PLUGIN_LABEL)
            visible = labels.get(annotation_keys.DEVICE_PLUGIN_VISIBLE_LABEL, "")
            # The operator's privileged plugin, where it runs, advertises every GPU whatever
            # the chart's instance beside it does (gpu-operator issue #1388).
            if value == reactions.EXCLUDING_INSTANCE and not operator_plugin:
                instance = f"{reactions.EXCLUDING_INSTANCE}:{visible}"
            elif node.gpu_operator and not operator_plugin:
                instance = reactions.NO_PLUGIN
            else:
                instance = "cluster"
            reactions.select_device_plugin(self, node, instance)
        self._labels_seen = self.store.resource_version

    # ---- keeping the store and host trees in step ---------------------------------------------

    def _create_objects(self, node: state.SimNode, index: int) -> None:
        self._mirror.create(node, index)
        if self.scenario.dra:
            dra.publish(self.store, node)
        self.log_kernel(node, [kernel_lines.boot_banner(node.kernel_release),
                               kernel_lines.module_loaded(node.driver_module)], at=node.booted_at)
        self.touch(node)

    def _write_hosts(self, names: set[str]) -> None:
        if self.hosts_root is not None:
            for name in sorted(names):
                hosts.write_host_tree(self._by_name[name], self.hosts_root)
        self._dirty_hosts.clear()


def _sim_node(spec: scenario.NodeSpec, world: scenario.Scenario,
              booted: datetime) -> state.SimNode:
    return state.SimNode(
        name=spec.name,
        boot_id=state.new_boot_id(f"{spec.name}/boot/0"),
        driver_module=spec.driver,
        driver_library=spec.driver,
        kernel_release=spec.kernel_release,
        gpus=[_sim_gpu(spec, i) for i in range(spec.gpus)],
        ipvs_persisted=spec.ipvs_persisted,
        bmc=spec.bmc,
        gpu_reset=spec.gpu_reset,
        ipvs_loaded=spec.ipvs_module_available,
        kube_proxy_ready=spec.ipvs_module_available,
        dns_servers=spec.dns_servers,
        hostname_label=world.hostname_label,
        xid_count_metric=world.xid_count_metric,
        xid_gauge_zero=world.xid_gauge_zero,
        exporter_started=booted,
        kubelet_version=spec.kubelet_version,
        resolv_stub=spec.resolv_stub,
        auto_upgrades=spec.auto_upgrades,
        nvidia_blacklisted=spec.nvidia_blacklisted,
        packages_held=spec.packages_held,
        rke2_units=spec.rke2_units,
        swap_enabled=spec.swap_enabled,
        gpu_operator=spec.gpu_operator,
        ipvs_module_available=spec.ipvs_module_available,
        booted_at=booted,
    )


def _sim_gpu(spec: scenario.NodeSpec, index: int) -> state.SimGpu:
    pci = f"0000:{PCI_BUSES[index]:02x}:00.0"
    return state.SimGpu(index=index, uuid=state.new_uuid(f"{spec.name}/{pci}"), pci=pci,
                        model=spec.model)

