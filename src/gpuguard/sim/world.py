"""The World: a fleet of simulated GPU nodes that reacts to a scenario's events over time.

The world is what gpuguard runs against in demos and tests; it holds no product logic. It
owns ``state.SimNode``/``SimGpu`` (what the exporters and host trees render) and keeps the
store's Node objects in step through ``sim.mirror`` — status only (capacity, allocatable,
bootID, conditions), by merge patches, so ``spec.unschedulable`` and annotations stay with
humans and gpuguard. Build the clock at the scenario's start (``SimClock(spec.start)``) so
timestamps match the seed's dates; offsets count from the clock's time at construction.

The world's rules (deterministic):

- ``xid``: the kernel log gets ``NVRM: GPU at PCI:...: GPU-<uuid>`` (once per GPU per boot)
  and the Xid line; dcgm-exporter's gauge holds the code (``xid_last``). A code outside the
  device plugin's skip list (13, 31, 43, 45, 68, 109) marks the GPU unhealthy: allocatable
  drops, capacity stays (seed 004). Xid 79 also takes the GPU off the bus (config space all
  ff, no dcgm series) and adds the open driver's "fallen off the bus" message.
- ``gpu_lost``: the device plugin stops offering the GPU (allocatable -1); ``off_bus: true``
  also takes it off the bus with the no-Xid message only.
- ``dbe``: Xid 48, uncorrectable remapped rows +1, GPU unhealthy; ``remap: true`` adds Xid 63
  and a pending row remap (cleared by a reset or reboot).
- ``reboot``: a warm reboot. With a GPU off the bus it hangs (seed 004: "soft reboot stalls
  waiting for the dead GPU"): the node stays NotReady on its old boot ID until a
  ``power_cycle``. Otherwise, and always for ``power_cycle``: NotReady for a few minutes, then
  a new boot ID; the loaded kernel module becomes the installed library version and a pending
  kernel boots; ip_vs is loaded only if persisted (kube-proxy Ready only then); dcgm-exporter
  restarts (Xid gauges empty); phantoms clear; running workloads fail. GPUs that were lost or
  off the bus come back, unless ``stay_lost: true`` (then they are not even enumerated:
  capacity drops). A warm reboot never brings back a GPU that fell off the bus.
- ``gpu_reset``: fails on a GPU off the bus (config space ff); otherwise clears its phantom
  and pending remap, and the operand cycle of the reset procedure restarts the device plugin
  (every GPU on the bus offered again — seed 004) and dcgm-exporter (gauges empty).
  Any device-plugin restart re-enumerates: a GPU off the bus is no longer registered, so
  capacity drops with allocatable and "capacity > allocatable" no longer shows the loss.
- ``driver_upgrade``: method ``host`` (unattended-upgrades): the NVML library now, the kernel
  module at the next reboot (NVML mismatch while Ready). Method ``operator``: both at once,
  with an allocatable dip and operand restarts.
- ``workload``: a Pod requesting GPUs, bound to the node (there is no scheduler: a cordoned
  node or too few free GPUs leaves it Pending for good; a GPU off the bus fails it with
  UnexpectedAdmissionError, seed 004). It records its profile on the GPUs, clears a phantom
  it lands on (seed 000) and ends Succeeded/Failed after ``duration``; it fails earlier when
  its GPU hits Xid 48/79/95, falls off the bus or is reset, or the node restarts.
- ``cordon``/``uncordon``/``annotate``: a human, through the store, like kubectl.
- ``pcie_degrade``: the GPU's link trains narrower/slower; only a power cycle retrains it.
- the rest (``phantom``, ``mig_reconfig``, ``kube_proxy_down``, ``dns_upstream``,
  ``ipvs_*``, ``dcgm_exporter_restart``, ``device_plugin_restart``, ``gfd_restart``,
  ``prometheus_down``) do what their names say; see the handlers below.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from gpuguard.model import durations
from gpuguard.sim import clock as simclock
from gpuguard.sim import hosts, kernel_lines, kube_objects, mirror, scenario, state, store

DEVICE_PLUGIN_SKIPPED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
FAULT_KINDS = frozenset({"xid", "gpu_lost", "dbe"})
WORKLOAD_KILLING_XIDS = frozenset({48, 79, 95})  # the job on that GPU dies with it
REBOOT_DOWNTIME = timedelta(minutes=3)
POWER_CYCLE_DOWNTIME = timedelta(minutes=6)
INITIAL_UPTIME = timedelta(days=12)  # nodes have been up a while when a scenario starts
# Bus numbers of GPU slots by index (GPU 4 at 0000:99:00.0 as in the seed's fault ledger).
PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x99, 0xAB, 0xBA, 0xDB,
             0x19, 0x2B, 0x3B, 0x5E, 0x9A, 0xAC, 0xBB, 0xDC)
_XID_NAMES = {13: "Graphics Engine Exception", 31: "GPU memory page fault",
              43: "GPU stopped processing", 45: "Preemptive cleanup, due to previous errors",
              48: "DBE (Double Bit Error) ECC Error", 63: "ECC page retirement or row remapping",
              64: "ECC page retirement or row remapper recording failure",
              79: "GPU has fallen off the bus"}

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
        self._prometheus_down_until: datetime | None = None
        self._first_fault: dict[str, timedelta] = {}
        self._announced: set[tuple[str, int]] = set()
        self._mirror = mirror.StoreMirror(objects, self.origin)
        self._boots: dict[str, int] = {}
        self._pods: dict[str, tuple[str, str]] = {}  # workload pod -> (namespace, outcome)
        self._dirty_hosts: set[str] = set()

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
        return self._prometheus_down_until is None

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
        times = [self._prometheus_down_until] if self._prometheus_down_until else []
        for node in self.nodes:
            times += [w.ends for w in node.workloads if w.ends is not None]
            times += [t for t in (node.down_until, node.allocatable_dip_until) if t is not None]
        return times

    def _react(self) -> None:
        """Reactions due now: workloads ending, boots completing, dips ending, Prometheus back."""
        now = self.clock.now()
        if self._prometheus_down_until is not None and self._prometheus_down_until <= now:
            self._prometheus_down_until = None
            self._record("prometheus_up", None, "Prometheus answers again")
        for node in self.nodes:
            for workload in [w for w in node.workloads if w.ends is not None and w.ends <= now]:
                self._finish_workload(node, workload)
            if node.down_until is not None and node.down_until <= now:
                self._boot_complete(node)
            if node.allocatable_dip_until is not None and node.allocatable_dip_until <= now:
                node.allocatable_dip_until = None
                self._record("dip_end", node.name, f"allocatable back to {node.gpu_allocatable}")
                self._touch(node)

    def _apply(self, event: scenario.Event) -> None:
        if event.node is not None and event.kind in FAULT_KINDS and self._is_fault(event):
            self._first_fault.setdefault(event.node, event.at)
        handler = getattr(self, f"_on_{event.kind}")
        handler(event.payload, None if event.node is None else self._by_name[event.node])

    @staticmethod
    def _is_fault(event: scenario.Event) -> bool:
        payload = event.payload
        return not (isinstance(payload, scenario.XidPayload)
                    and payload.xid in DEVICE_PLUGIN_SKIPPED_XIDS)

    # ---- GPU faults --------------------------------------------------------------------------

    def _on_xid(self, p: scenario.XidPayload, node: state.SimNode) -> None:
        gpu = node.gpu(p.gpu)
        if not gpu.on_bus:
            self._record("xid", node.name, f"GPU {gpu.index} is off the bus: no Xid {p.xid}")
            return
        lines = [kernel_lines.xid(gpu.pci, p.xid, p.message, pid=p.pid, process=p.process)]
        self._xid(node, gpu, p.xid, lines, p.message)

    def _xid(self, node: state.SimNode, gpu: state.SimGpu, code: int, lines: list[str],
             message: str | None = None) -> None:
        self._announce(node, gpu)
        if code == 79:
            gpu.on_bus = False
            lines = lines + kernel_lines.fallen_off_bus(gpu.pci, hosts.device_id(gpu.model))
        self._kernel(node, lines)
        gpu.xid_last = code
        gpu.xid_last_msg = message or _XID_NAMES.get(code, "")
        gpu.xid_history.append((self.clock.now(), code))
        unhealthy = code not in DEVICE_PLUGIN_SKIPPED_XIDS
        if unhealthy:
            gpu.offered = False
        if code in WORKLOAD_KILLING_XIDS:
            self._fail_workloads(node, gpu.index)
        effect = "off the bus, " if code == 79 else ""
        effect += "device plugin marks it unhealthy" if unhealthy else "user-code Xid"
        self._record("xid", node.name, f"Xid {code} on GPU {gpu.index} ({gpu.pci}): {effect}")
        self._touch(node)

    def _on_gpu_lost(self, p: scenario.GpuLostPayload, node: state.SimNode) -> None:
        gpu = node.gpu(p.gpu)
        gpu.offered = False
        detail = f"GPU {gpu.index} ({gpu.pci}) no longer offered"
        if p.off_bus and gpu.on_bus:
            gpu.on_bus = False
            self._fail_workloads(node, gpu.index)
            self._kernel(node, kernel_lines.fallen_off_bus(gpu.pci, hosts.device_id(gpu.model)))
            detail += ", off the bus (no Xid)"
        self._record("gpu_lost", node.name,
                     f"{detail}: allocatable {node.gpu_allocatable}/{node.gpu_capacity}")
        self._touch(node)

    def _on_dbe(self, p: scenario.DbePayload, node: state.SimNode) -> None:
        gpu = node.gpu(p.gpu)
        gpu.uncorrectable_remapped_rows += 1
        self._xid(node, gpu, 48, [kernel_lines.xid(gpu.pci, 48)])
        if p.remap:
            gpu.row_remap_pending = 1
            self._xid(node, gpu, 63, [kernel_lines.xid(gpu.pci, 63)])
        self._record("dbe", node.name, f"GPU {gpu.index}: uncorrectable remapped rows "
                                       f"{gpu.uncorrectable_remapped_rows}")

    def _on_pcie_degrade(self, p: scenario.PcieDegradePayload, node: state.SimNode) -> None:
        gpu = node.gpu(p.gpu)
        gpu.link_width = p.width
        gpu.link_speed_gts = p.speed or gpu.link_speed_gts
        self._record("pcie_degrade", node.name, f"GPU {gpu.index} link x{gpu.link_width} "
                                                f"{gpu.link_speed_gts:.1f} GT/s")
        self._touch(node)

    def _on_phantom(self, p: scenario.GpuPayload, node: state.SimNode) -> None:
        node.gpu(p.gpu).phantom = True
        self._record("phantom", node.name, f"GPU {p.gpu}: busy with no process (SM 100 %, 0 MiB)")

    def _on_phantom_clear(self, p: scenario.GpuPayload, node: state.SimNode) -> None:
        node.gpu(p.gpu).phantom = False
        self._record("phantom_clear", node.name, f"GPU {p.gpu}: phantom utilisation gone")

    def _on_gpu_reset(self, p: scenario.GpuPayload, node: state.SimNode) -> None:
        gpu = node.gpu(p.gpu)
        if not gpu.on_bus:
            self._record("gpu_reset", node.name,
                         f"GPU {gpu.index} reset failed: config space reads all ff")
            return
        self._fail_workloads(node, gpu.index)
        gpu.phantom = False
        gpu.row_remap_pending = 0
        self._restart_device_plugin(node)
        self._restart_exporter(node)
        self._record("gpu_reset", node.name, f"GPU {gpu.index} reset; operands restarted, "
                                             f"allocatable {node.gpu_allocatable}")
        self._touch(node)

    # ---- node lifecycle ----------------------------------------------------------------------

    def _on_reboot(self, p: scenario.RestartPayload, node: state.SimNode) -> None:
        off_bus = [g.index for g in node.gpus if g.registered and not g.on_bus]
        if off_bus:
            node.reboot_hung = True
            self._set_ready(node, False)
            self._fail_workloads(node)
            self._touch(node)
            self._record("reboot", node.name, f"reboot hangs: GPU {off_bus} off the bus does not "
                                              "answer shutdown; needs a power cycle")
            return
        self._restart(node, REBOOT_DOWNTIME, stay_lost=p.stay_lost, kind="reboot")

    def _on_power_cycle(self, p: scenario.RestartPayload, node: state.SimNode) -> None:
        self._restart(node, POWER_CYCLE_DOWNTIME, stay_lost=p.stay_lost, kind="power_cycle")

    def _restart(self, node: state.SimNode, downtime: timedelta, *, stay_lost: bool,
                 kind: str) -> None:
        self._fail_workloads(node)
        for gpu in node.gpus:
            _power_on_gpu(gpu, stay_lost=stay_lost, retrain_link=kind == "power_cycle")
        node.reboot_hung = False
        node.allocatable_dip_until = None
        node.down_until = self.clock.now() + downtime
        self._set_ready(node, False)
        self._record(kind, node.name, f"down for {durations.format_duration(downtime)}"
                                      + (" (lost GPUs stay lost)" if stay_lost else ""))
        self._touch(node)

    def _boot_complete(self, node: state.SimNode) -> None:
        now = self.clock.now()
        self._boots[node.name] = self._boots.get(node.name, 0) + 1
        node.boot_id = state.new_boot_id(f"{node.name}/boot/{self._boots[node.name]}")
        node.booted_at = now
        node.down_until = None
        node.kernel_release = node.pending_kernel_release or node.kernel_release
        node.pending_kernel_release = None
        node.driver_module = node.driver_library
        node.ipvs_loaded = node.ipvs_persisted and node.ipvs_module_available
        node.kube_proxy_ready = node.ipvs_loaded
        node.exporter_started = now
        self._announced = {a for a in self._announced if a[0] != node.name}
        self._kernel(node, [kernel_lines.boot_banner(node.kernel_release),
                            kernel_lines.module_loaded(node.driver_module)])
        self._set_ready(node, True)
        self._record("boot_complete", node.name, (
            f"boot ID {node.boot_id[:8]}, kernel {node.kernel_release}, module "
            f"{node.driver_module}, ip_vs {'loaded' if node.ipvs_loaded else 'NOT loaded'}, "
            f"GPUs {node.gpu_allocatable}/{node.gpu_capacity}"))
        self._touch(node)

    def _on_driver_upgrade(self, p: scenario.DriverUpgradePayload, node: state.SimNode) -> None:
        old = node.driver_module
        node.driver_library = p.version
        node.pending_kernel_release = p.kernel or node.pending_kernel_release
        if p.method == "operator":
            node.driver_module = p.version
            self._dip(node, p.dip, 0)
            self._restart_device_plugin(node)
            self._restart_exporter(node)
            detail = f"driver {old} -> {p.version} by the GPU Operator (allocatable dip)"
        else:
            self._kernel(node, kernel_lines.api_mismatch(p.version, old))
            kernel = f", kernel {p.kernel} at next boot" if p.kernel else ""
            detail = f"NVML library {p.version} now, kernel module {old} until reboot{kernel}"
        self._record("driver_upgrade", node.name, detail)
        self._touch(node)

    def _on_mig_reconfig(self, p: scenario.DipPayload, node: state.SimNode) -> None:
        self._dip(node, p.dip, p.gpus)
        self._record("mig_reconfig", node.name, f"allocatable dips for "
                                                f"{durations.format_duration(p.dip)}")
        self._touch(node)

    def _dip(self, node: state.SimNode, length: timedelta, gpus: int) -> None:
        node.allocatable_dip_until = self.clock.now() + length
        node.allocatable_dip_gpus = gpus

    def _on_dcgm_exporter_restart(self, _p: scenario.NodePayload, node: state.SimNode) -> None:
        self._restart_exporter(node)
        self._record("dcgm_exporter_restart", node.name, "Xid gauges empty until the next Xid")
        self._touch(node)

    def _on_device_plugin_restart(self, _p: scenario.NodePayload, node: state.SimNode) -> None:
        self._restart_device_plugin(node)
        self._record("device_plugin_restart", node.name,
                     f"GPUs re-enumerated: allocatable {node.gpu_allocatable}/{node.gpu_capacity}")
        self._touch(node)

    def _on_gfd_restart(self, p: scenario.CountPayload, node: state.SimNode) -> None:
        node.gfd_restarts += p.count
        self._record("gfd_restart", node.name,
                     f"gpu-feature-discovery restarted ({node.gfd_restarts} restarts)")
        self._touch(node)

    def _restart_exporter(self, node: state.SimNode) -> None:
        for gpu in node.gpus:
            gpu.xid_last = None
            gpu.xid_last_msg = ""
        node.exporter_started = self.clock.now()
        self._bump_restarts(node, "dcgm-exporter")

    def _restart_device_plugin(self, node: state.SimNode) -> None:
        for gpu in node.gpus:
            gpu.registered = gpu.offered = gpu.on_bus
        self._bump_restarts(node, "device-plugin")

    def _bump_restarts(self, node: state.SimNode, component: str) -> None:
        self._mirror.restarted(node.name, component)

    # ---- host configuration ------------------------------------------------------------------

    def _on_kube_proxy_down(self, _p: scenario.NodePayload, node: state.SimNode) -> None:
        node.kube_proxy_ready = False
        node.ipvs_loaded = False
        self._record("kube_proxy_down", node.name, "kube-proxy not Ready: ip_vs not loaded")
        self._touch(node)

    def _on_ipvs_unpersist(self, _p: scenario.NodePayload, node: state.SimNode) -> None:
        node.ipvs_persisted = False
        self._record("ipvs_unpersist", node.name, "/etc/modules-load.d/ipvs.conf removed")
        self._touch(node)

    def _on_ipvs_load(self, p: scenario.IpvsLoadPayload, node: state.SimNode) -> None:
        if not node.ipvs_module_available:
            self._record("ipvs_load", node.name, "modprobe ip_vs: module not found")
            return
        node.ipvs_loaded = node.kube_proxy_ready = True
        node.ipvs_persisted = node.ipvs_persisted or p.persist
        persisted = "persisted" if node.ipvs_persisted else "not persisted"
        self._record("ipvs_load", node.name, f"modprobe ip_vs; kube-proxy Ready ({persisted})")
        self._touch(node)

    def _on_dns_upstream(self, p: scenario.DnsUpstreamPayload, node: state.SimNode) -> None:
        node.dns_servers = tuple(p.servers)
        if p.stub is not None:
            node.resolv_stub = p.stub
        self._record("dns_upstream", node.name, "upstream DNS " + ", ".join(p.servers))
        self._touch(node)

    def _on_prometheus_down(self, p: scenario.PrometheusDownPayload, _node: None) -> None:
        self._prometheus_down_until = self.clock.now() + p.duration
        self._record("prometheus_down", None,
                     f"Prometheus unreachable for {durations.format_duration(p.duration)}")

    # ---- humans, through the API -------------------------------------------------------------

    def _on_cordon(self, p: scenario.CordonPayload, node: state.SimNode) -> None:
        patch: kube_objects.Obj = {"spec": {"unschedulable": True}}
        if p.key:
            patch["metadata"] = {"annotations": {p.key: p.value or ""}}
        self.store.merge_patch("Node", "", node.name, patch)
        self._record("cordon", node.name, "a human cordons" + (f" ({p.key})" if p.key else ""))

    def _on_uncordon(self, _p: scenario.NodePayload, node: state.SimNode) -> None:
        self.store.merge_patch("Node", "", node.name, {"spec": {"unschedulable": None}})
        self._record("uncordon", node.name, "a human uncordons")

    def _on_annotate(self, p: scenario.AnnotatePayload, node: state.SimNode) -> None:
        patch = {"metadata": {"annotations": {p.key: p.value}}}
        self.store.merge_patch("Node", "", node.name, patch)
        action = f"{p.key}={p.value}" if p.value is not None else f"{p.key} removed"
        self._record("annotate", node.name, f"a human annotates {action}")

    # ---- workloads ---------------------------------------------------------------------------

    def _on_workload(self, p: scenario.WorkloadPayload, node: state.SimNode) -> None:
        name = p.name or f"{p.profile.value.replace('_', '-')}-{len(self._pods):04d}"
        count = p.gpus if isinstance(p.gpus, int) else len(p.gpus)
        pod = kube_objects.workload_pod(name, p.namespace, count, p.profile.value,
                                        self.clock.now())
        self._pods[name] = (p.namespace, p.outcome)
        problem = self._placement_problem(node)
        gpus = self._free_gpus(node, p.gpus)
        if problem or gpus is None:
            reason = problem or f"0/1 nodes are available: Insufficient {kube_objects.GPU_RESOURCE}"
            self.store.create("Pod", p.namespace, kube_objects.unschedulable(pod, reason))
            self._record("workload", node.name, f"{name} Pending: {reason}")
            return
        if any(not g.on_bus for g in node.gpus if g.registered):
            self.store.create("Pod", p.namespace, kube_objects.admission_failed(pod, node.name))
            self._record("workload", node.name, f"{name} Failed: UnexpectedAdmissionError")
            return
        self._start_workload(node, p, name, pod, gpus)

    def _placement_problem(self, node: state.SimNode) -> str | None:
        spec = self.store.get("Node", "", node.name).get("spec", {})
        if spec.get("unschedulable"):
            return "0/1 nodes are available: node is unschedulable"
        if not node.ready:
            return "0/1 nodes are available: node is not ready"
        return None

    def _free_gpus(self, node: state.SimNode, wanted: int | list[int]) -> tuple[int, ...] | None:
        free = [g.index for g in node.gpus
                if g.registered and g.offered and node.workload_on(g.index) is None]
        withheld = node.gpu_allocatable - node.gpu_allocatable_at(self.clock.now())
        free = free[: max(0, len(free) - withheld)]
        if isinstance(wanted, int):
            return tuple(free[:wanted]) if len(free) >= wanted else None
        return tuple(wanted) if set(wanted) <= set(free) else None

    def _start_workload(self, node: state.SimNode, p: scenario.WorkloadPayload, name: str,
                        pod: kube_objects.Obj, gpus: tuple[int, ...]) -> None:
        now = self.clock.now()
        self.store.create("Pod", p.namespace, kube_objects.bound(pod, node.name, now))
        ends = now + p.duration if p.duration is not None else None
        node.workloads.append(state.Workload(pod=name, namespace=p.namespace, gpus=gpus,
                                             profile=p.profile, started=now, ends=ends))
        cleared = [i for i in gpus if node.gpu(i).phantom]
        for index in cleared:
            node.gpu(index).phantom = False
        note = f"; phantom cleared on GPU {cleared}" if cleared else ""
        self._record("workload", node.name,
                     f"{name} Running on GPU {list(gpus)} ({p.profile.value}){note}")

    def _finish_workload(self, node: state.SimNode, workload: state.Workload,
                         outcome: str | None = None) -> None:
        node.workloads.remove(workload)
        result = outcome or self._pods.get(workload.pod, ("", "Succeeded"))[1]
        status = kube_objects.finished_status(result, workload.started, self.clock.now())
        self.store.merge_patch("Pod", workload.namespace, workload.pod, {"status": status})
        self._record("workload_end", node.name, f"{workload.pod} {result}")

    def _fail_workloads(self, node: state.SimNode, gpu: int | None = None) -> None:
        """Fail the workloads of the node, or only those holding GPU ``gpu``."""
        for workload in [w for w in node.workloads if gpu is None or gpu in w.gpus]:
            self._finish_workload(node, workload, outcome="Failed")

    # ---- keeping the store, the kernel log and host trees in step ----------------------------

    def _create_objects(self, node: state.SimNode, index: int) -> None:
        self._mirror.create(node, index)
        self._kernel(node, [kernel_lines.boot_banner(node.kernel_release),
                            kernel_lines.module_loaded(node.driver_module)], at=node.booted_at)
        self._touch(node)

    def _touch(self, node: state.SimNode) -> None:
        """The node changed: mirror it into the store now, rewrite its host tree after the step."""
        self._mirror.sync(node, self.clock.now())
        self._dirty_hosts.add(node.name)

    def _set_ready(self, node: state.SimNode, ready: bool) -> None:
        if node.ready != ready:
            node.ready = ready
            self._mirror.readiness_changed(node.name, self.clock.now())

    def _announce(self, node: state.SimNode, gpu: state.SimGpu) -> None:
        if (node.name, gpu.index) not in self._announced:
            self._announced.add((node.name, gpu.index))
            self._kernel(node, [kernel_lines.gpu_at(gpu.pci, gpu.uuid)])

    def _kernel(self, node: state.SimNode, lines: list[str], at: datetime | None = None) -> None:
        when = at or self.clock.now()
        uptime = when - (node.booted_at or self.origin)
        node.kernel_log.extend(kernel_lines.stamp(lines, node.name, when, uptime))

    def _write_hosts(self, names: set[str]) -> None:
        if self.hosts_root is not None:
            for name in sorted(names):
                hosts.write_host_tree(self._by_name[name], self.hosts_root)
        self._dirty_hosts.clear()

    def _record(self, kind: str, node: str | None, detail: str) -> None:
        seconds = self.elapsed.total_seconds()
        self.timeline.append(state.TimelineEntry(t=seconds, kind=kind, node=node, detail=detail))


def _power_on_gpu(gpu: state.SimGpu, *, stay_lost: bool, retrain_link: bool) -> None:
    """A GPU after a restart: back on the bus and offered, or, if it stays lost, not enumerated.

    Only a power cycle retrains a degraded PCIe link to its nominal width and speed.
    """
    if retrain_link:
        gpu.link_width, gpu.link_speed_gts = gpu.link_width_max, gpu.link_speed_max_gts
    lost = not (gpu.on_bus and gpu.offered and gpu.registered)
    if lost and stay_lost:
        gpu.on_bus = gpu.registered = gpu.offered = False
    else:
        gpu.on_bus = gpu.registered = gpu.offered = True
    gpu.xid_last = None
    gpu.xid_last_msg = ""
    gpu.phantom = False
    gpu.row_remap_pending = 0


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
        ipvs_loaded=spec.ipvs_module_available,
        kube_proxy_ready=spec.ipvs_module_available,
        dns_servers=spec.dns_servers,
        hostname_label=world.hostname_label,
        exporter_started=booted,
        kubelet_version=spec.kubelet_version,
        resolv_stub=spec.resolv_stub,
        auto_upgrades=spec.auto_upgrades,
        nvidia_blacklisted=spec.nvidia_blacklisted,
        packages_held=spec.packages_held,
        rke2_units=spec.rke2_units,
        swap_enabled=spec.swap_enabled,
        ipvs_module_available=spec.ipvs_module_available,
        booted_at=booted,
    )


def _sim_gpu(spec: scenario.NodeSpec, index: int) -> state.SimGpu:
    pci = f"0000:{PCI_BUSES[index]:02x}:00.0"
    return state.SimGpu(index=index, uuid=state.new_uuid(f"{spec.name}/{pci}"), pci=pci,
                        model=spec.model)
