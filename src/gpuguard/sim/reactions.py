"""What each scenario event does to the world: the simulator's rules, one function per event.

``REACTIONS`` maps each event kind to its reaction, ``reaction(stage, payload, node)``; the
world calls it. A reaction sees the world only as a ``Stage`` (what it may do: change
``state.SimNode``/``SimGpu``, log kernel lines, record the timeline, touch the node so the world
mirrors it into the store), so this module does not import ``sim.world``. It holds no product
logic.

The world's rules (deterministic):

- ``xid``: the kernel log gets ``NVRM: GPU at PCI:...: GPU-<uuid>`` (once per GPU per boot)
  and the Xid line; dcgm-exporter's gauge holds the code (``xid_last``). A code outside the
  device plugin's skip list (13, 31, 43, 45, 68, 109) marks the GPU unhealthy: allocatable
  drops, capacity stays (the lifecycle report [docs/design.md#incidents]). Xid 79 also takes the GPU
  off the bus (config space all ff, no dcgm series) and adds the open driver's "fallen off the bus"
  message.
- ``gpu_lost``: the device plugin stops offering the GPU (allocatable -1); ``off_bus: true``
  also takes it off the bus with the no-Xid message only.
- ``dbe``: Xid 48, uncorrectable remapped rows +1, GPU unhealthy; ``remap: true`` adds Xid 63
  and a pending row remap (cleared by a reset or reboot).
- ``reboot``: a warm reboot. With a GPU off the bus it hangs (the lifecycle report: "soft
  reboot stalls waiting for the dead GPU"): the node stays NotReady on its old boot ID until a
  ``power_cycle``. Otherwise, and always for ``power_cycle``: NotReady for a few minutes, then
  a new boot ID; the loaded kernel module becomes the installed library version and a pending
  kernel boots; ip_vs is loaded only if persisted (kube-proxy Ready only then); dcgm-exporter
  restarts (Xid gauges empty); phantoms clear; running workloads fail. GPUs that were lost or
  off the bus come back, unless ``stay_lost: true`` (then they are not even enumerated:
  capacity drops). A warm reboot never brings back a GPU that fell off the bus.
- ``gpu_reset``: fails on a GPU off the bus (config space ff); otherwise clears its phantom
  and pending remap, and the operand cycle of the reset procedure restarts the device plugin
  (every GPU on the bus offered again — the lifecycle report) and dcgm-exporter (gauges empty).
  Any device-plugin restart re-enumerates: a GPU off the bus is no longer registered, so
  capacity drops with allocatable and "capacity > allocatable" no longer shows the loss.
- ``driver_upgrade``: method ``host`` (unattended-upgrades): the NVML library now, the kernel
  module at the next reboot (NVML mismatch while Ready). Method ``operator``: both at once,
  with an allocatable dip and operand restarts.
- ``workload``: a Pod requesting GPUs, bound to the node (there is no scheduler: a cordoned
  node or too few free GPUs leaves it Pending for good; a GPU off the bus fails it with
  UnexpectedAdmissionError, the lifecycle report). It records its profile on the GPUs, clears a
  phantom it lands on (the phantom incident) and ends Succeeded/Failed after ``duration``; it fails
  earlier when its GPU hits Xid 48/79/95, falls off the bus or is reset, or the node restarts.
- ``cordon``/``uncordon``/``annotate``: a human, through the store, like kubectl.
- ``host_job``: a job started on the host with docker, outside Kubernetes: it runs on its GPU
  unless the GPU is off the bus or its compute mode is PROHIBITED; an Xid that kills workloads
  on that GPU, or a restart, kills it too.
- per-GPU advertising (docs/gpu-isolation.md): every device-plugin start enumerates the GPUs on
  the bus as Healthy — a restart re-advertises a GPU it had marked unhealthy — except that the
  per-node instance (selected by the node label ``gpuguard.io/device-plugin=excluding``, which
  the world follows like the DaemonSet controller) leaves out the UUIDs on the host's list.
  Compute mode resets to DEFAULT at every boot and GPU reset. ``nvreg_exclude``: a person puts
  the GPU in ``NVreg_ExcludedGpus``; from the next boot the driver does not attach it.
- ``pcie_degrade``: the GPU's link trains narrower/slower; only a power cycle retrains it.
- ``gpu_slow``: a degraded card (clocks held down, a weak memory stack): a matmul on it reaches
  ``share`` of its model's dense throughput, which a burn-in measures; it lasts.
- ``gang_job``: a job of several GPU pods placed as its scheduler would (``sim.gangs``): the
  default scheduler pod by pod, Volcano all or nothing, Kueue admitted against free GPUs (else
  gated) then pod by pod; placed pods run like workloads, the rest wait Unschedulable.
- ``sxid``: an NVSwitch ``SXid`` line in the kernel log; the GPUs stay on the bus and offered
  (the device plugin watches GPU Xids, not the switches). ``fabric``: every GPU reports that
  NVLink fabric registration (Fabric Manager down: ``Not Started``); a boot registers them
  again. ``gpu_recovery``: the driver's recovery action on a GPU (what nvidia-smi answers until
  the repair: a GPU reset clears a reset-class one, any boot clears all) with its Xid 154, the
  device plugin marking the GPU unhealthy; ``logged: false`` leaves the line out of the log.
- ``throttle``, ``nvlink_errors``, ``ib_flap``: clock-event reason bits, NVLink error counters
  and InfiniBand link-downs over time, rendered by ``sim.fleet_view`` (docs/fleet-health.md).
- the rest (``phantom``, ``mig_reconfig``, ``kube_proxy_down``, ``dns_upstream``,
  ``ipvs_*``, ``dcgm_exporter_restart``, ``device_plugin_restart``, ``gfd_restart``,
  ``prometheus_down``, ``exporter_down``, ``job_hang``) do what their names say; see the
  ``on_*`` functions and ``REACTIONS`` below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

import yaml

from gpuguard.model import durations
from gpuguard.model import metric_names as mn
from gpuguard.sim import clock as simclock
from gpuguard.sim import gangs, hosts, kernel_lines, kube_objects, scenario, state, store, topology

EXCLUDING_INSTANCE = "excluding"  # state.SimNode.plugin_instance
NO_PLUGIN = "none"  # no device plugin selects the node: it advertises no GPU
DEVICE_PLUGIN_SKIPPED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
WORKLOAD_KILLING_XIDS = frozenset({48, 79, 95})  # the job on that GPU dies with it
# nvidia-smi's gpu_recovery_action -> NVML's nvmlDeviceGpuRecoveryAction_t and the Xid 154 name
RECOVERY_ACTIONS = {"None": (0, "None"), "GPU Reset": (1, "GPU Reset Required"),
                    "Node Reboot": (2, "Node Reboot Required"), "Drain P2P": (3, "Drain P2P"),
                    "Drain and Reset": (4, "Drain and Reset")}
RESET_CLEARS = frozenset({"GPU Reset", "Drain P2P", "Drain and Reset"})  # gpu_recovery actions
SWITCH_BUSES = (0x05, 0x06, 0x07, 0x08)  # the NVSwitches' PCI buses (sxid events)
REBOOT_DOWNTIME = timedelta(minutes=3)
POWER_CYCLE_DOWNTIME = timedelta(minutes=6)
_XID_NAMES = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "DBE (Double Bit Error) ECC Error",
    63: "ECC page retirement or row remapping",
    64: "ECC page retirement or row remapper recording failure",
    79: "GPU has fallen off the bus",
}


@dataclass
class Memory:
    """What the reactions remember between events."""

    pods: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod -> (namespace, outcome)
    boots: dict[str, int] = field(default_factory=dict)  # boots per node since the start
    announced: set[tuple[str, int]] = field(default_factory=set)  # (node, GPU) named this boot
    job_hangs: set[tuple[str, str]] = field(default_factory=set)  # (node, Job kind) to hang
    # the applying tool of declared changes (sim.change_tool): what each change installs
    # (driver, kernel), and the nodes it is changing (change name, boot ID when it started)
    playbooks: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    applying: dict[str, tuple[str, str]] = field(default_factory=dict)
    # series tenants' pods export (forged_metric): name, labels with the scrape target's
    forged: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


class Stage(Protocol):
    """The world as a reaction sees it (``sim.world.World`` is one)."""

    clock: simclock.SimClock
    store: store.ObjectStore
    memory: Memory
    prometheus_down_until: datetime | None
    nodes: list[state.SimNode]

    def record(self, kind: str, node: str | None, detail: str) -> None: ...
    def touch(self, node: state.SimNode) -> None: ...
    def set_ready(self, node: state.SimNode, ready: bool) -> None: ...
    def log_kernel(
        self, node: state.SimNode, lines: list[str], at: datetime | None = None
    ) -> None: ...
    def count_restart(self, node: str, component: str) -> None: ...


# ---- GPU faults ----------------------------------------------------------------------------------


def on_xid(w: Stage, p: scenario.XidPayload, node: state.SimNode) -> None:
    gpu = node.gpu(p.gpu)
    if not gpu.on_bus:
        w.record("xid", node.name, f"GPU {gpu.index} is off the bus: no Xid {p.xid}")
        return
    lines = [kernel_lines.xid(gpu.pci, p.xid, p.message, pid=p.pid, process=p.process)]
    _xid(w, node, gpu, p.xid, lines, p.message)


def _xid(
    w: Stage,
    node: state.SimNode,
    gpu: state.SimGpu,
    code: int,
    lines: list[str],
    message: str | None = None,
) -> None:
    _announce(w, node, gpu)
    if code == 79:
        gpu.on_bus = False
        lines = lines + kernel_lines.fallen_off_bus(gpu.pci, hosts.device_id(gpu.model))
    w.log_kernel(node, lines)
    gpu.xid_last = code
    gpu.xid_last_msg = message or _XID_NAMES.get(code, "")
    gpu.xid_history.append((w.clock.now(), code))
    unhealthy = code not in DEVICE_PLUGIN_SKIPPED_XIDS
    if unhealthy:
        gpu.offered = False
    if code in WORKLOAD_KILLING_XIDS:
        _fail_workloads(w, node, gpu.index)
    effect = "off the bus, " if code == 79 else ""
    effect += "device plugin marks it unhealthy" if unhealthy else "user-code Xid"
    w.record("xid", node.name, f"Xid {code} on GPU {gpu.index} ({gpu.pci}): {effect}")
    w.touch(node)


def on_sxid(w: Stage, p: scenario.SxidPayload, node: state.SimNode) -> None:
    switch = f"0000:{SWITCH_BUSES[p.switch % len(SWITCH_BUSES)]:02x}:00.0"
    w.log_kernel(node, [kernel_lines.sxid(p.switch, switch, p.sxid, p.severity, p.message)])
    w.record("sxid", node.name, f"NVSwitch {p.switch} ({switch}) SXid {p.sxid}, {p.severity}")
    w.touch(node)


def on_fabric(w: Stage, p: scenario.FabricPayload, node: state.SimNode) -> None:
    for gpu in node.gpus:
        gpu.fabric_state, gpu.fabric_status = p.state, p.status
    w.record("fabric", node.name, f"NVLink fabric registration: {p.state}, {p.status}")
    w.touch(node)


def on_gpu_recovery(w: Stage, p: scenario.GpuRecoveryPayload, node: state.SimNode) -> None:
    gpu = node.gpu(p.gpu)
    before, gpu.recovery_action = gpu.recovery_action, p.action
    message = f"GPU recovery action changed from {_action(before)} to {_action(p.action)}"
    lines = [kernel_lines.xid(gpu.pci, 154, message)] if p.logged else []
    _xid(w, node, gpu, 154, lines, message)
    missed = "" if p.logged else "; its Xid 154 line never reached the log"
    w.record("gpu_recovery", node.name, f"GPU {gpu.index} recovery action: {p.action}{missed}")


def _action(name: str) -> str:
    """As the driver prints it: NVML's value and name (``0x1 (GPU Reset Required)``)."""
    value, printed = RECOVERY_ACTIONS[name]
    return f"{value:#x} ({printed})"


def on_gpu_lost(w: Stage, p: scenario.GpuLostPayload, node: state.SimNode) -> None:
    gpu = node.gpu(p.gpu)
    gpu.offered = False
    detail = f"GPU {gpu.index} ({gpu.pci}) no longer offered"
    if p.off_bus and gpu.on_bus:
        gpu.on_bus = False
        _fail_workloads(w, node, gpu.index)
        w.log_kernel(node, kernel_lines.fallen_off_bus(gpu.pci, hosts.device_id(gpu.model)))
        detail += ", off the bus (no Xid)"
    w.record(
        "gpu_lost", node.name, f"{detail}: allocatable {node.gpu_allocatable}/{node.gpu_capacity}"
    )
    w.touch(node)


def on_dbe(w: Stage, p: scenario.DbePayload, node: state.SimNode) -> None:
    gpu = node.gpu(p.gpu)
    gpu.uncorrectable_remapped_rows += 1
    _xid(w, node, gpu, 48, [kernel_lines.xid(gpu.pci, 48)])
    if p.remap:
        gpu.row_remap_pending = 1
        _xid(w, node, gpu, 63, [kernel_lines.xid(gpu.pci, 63)])
    w.record(
        "dbe",
        node.name,
        f"GPU {gpu.index}: uncorrectable remapped rows {gpu.uncorrectable_remapped_rows}",
    )


def on_bad_metric(w: Stage, p: scenario.BadMetricPayload, node: state.SimNode) -> None:
    """A sound GPU reported faulty: dcgm-exporter's last-Xid gauge shows the code and the
    device plugin stops offering the GPU, with nothing in the kernel log and the card on the
    bus. The shape of a bad telemetry rollout: the device plugin's health check watches the
    same NVML Xid events dcgm reads (k8s-device-plugin, internal/rm/health.go), so one
    misreading reaches both."""
    gpu = node.gpu(p.gpu)
    gpu.xid_last = p.xid
    gpu.offered = False
    w.record("bad_metric", node.name, f"GPU {gpu.index} reported Xid {p.xid}; the card is sound")
    w.touch(node)


FORGER_JOB = "kubernetes-pods"
"""The scrape job of pods annotated ``prometheus.io/scrape`` (Prometheus' example Kubernetes
configuration), which writes ``namespace``, ``pod`` and ``node`` from service discovery."""


def on_forged_metric(w: Stage, p: scenario.ForgedMetricPayload, node: state.SimNode) -> None:
    """A tenant's pod on ``node`` starts exporting an Xid series for another node's GPU. The
    card and the node it claims are sound; Prometheus scrapes the pod from now on and adds the
    target's labels (an exported ``node`` becomes ``exported_node``: the target has one)."""
    target = {"job": FORGER_JOB, "namespace": p.namespace, "pod": p.pod,
              "instance": f"{p.pod}.{p.namespace}:9400", "node": node.name}  # fmt: skip
    if p.metric == "dcgm":
        labels = {"Hostname": p.claims, "gpu": str(p.gpu), **target}
        w.memory.forged.append((mn.DCGM_XID_LAST, labels, float(p.xid)))
    else:
        labels = {"exported_node": p.claims, "gpu": str(p.gpu), "xid": str(p.xid), **target}
        w.memory.forged.append((mn.XID_TOTAL, labels, 1.0))
    w.record("forged_metric", node.name,
             f"pod {p.namespace}/{p.pod} exports Xid {p.xid} for GPU {p.gpu} of {p.claims}")


def on_pcie_degrade(w: Stage, p: scenario.PcieDegradePayload, node: state.SimNode) -> None:
    gpu = node.gpu(p.gpu)
    gpu.link_width = p.width
    gpu.link_speed_gts = p.speed or gpu.link_speed_gts
    w.record(
        "pcie_degrade",
        node.name,
        f"GPU {gpu.index} link x{gpu.link_width} {gpu.link_speed_gts:.1f} GT/s",
    )
    w.touch(node)


def on_phantom(w: Stage, p: scenario.GpuPayload, node: state.SimNode) -> None:
    node.gpu(p.gpu).phantom = True
    w.record("phantom", node.name, f"GPU {p.gpu}: busy with no process (SM 100 %, 0 MiB)")


def on_phantom_clear(w: Stage, p: scenario.GpuPayload, node: state.SimNode) -> None:
    node.gpu(p.gpu).phantom = False
    w.record("phantom_clear", node.name, f"GPU {p.gpu}: phantom utilisation gone")


def on_gpu_reset(w: Stage, p: scenario.GpuPayload, node: state.SimNode) -> None:
    gpu = node.gpu(p.gpu)
    if not gpu.on_bus:
        w.record("gpu_reset", node.name, f"GPU {gpu.index} reset failed: config space reads all ff")
        return
    _fail_workloads(w, node, gpu.index)
    gpu.phantom = False
    gpu.row_remap_pending = 0
    gpu.compute_mode = "DEFAULT"  # a reset re-initialises the GPU
    if gpu.recovery_action in RESET_CLEARS:
        gpu.recovery_action = "None"
    _restart_device_plugin(w, node)
    _restart_exporter(w, node)
    w.record(
        "gpu_reset",
        node.name,
        f"GPU {gpu.index} reset; operands restarted, allocatable {node.gpu_allocatable}",
    )
    w.touch(node)


# ---- node lifecycle ------------------------------------------------------------------------------


def on_reboot(w: Stage, p: scenario.RestartPayload, node: state.SimNode) -> None:
    off_bus = [g.index for g in node.gpus if g.registered and not g.on_bus]
    if off_bus:
        node.reboot_hung = True
        w.set_ready(node, False)
        _fail_workloads(w, node)
        w.touch(node)
        w.record(
            "reboot",
            node.name,
            f"reboot hangs: GPU {off_bus} off the bus does not "
            "answer shutdown; needs a power cycle",
        )
        return
    _restart(w, node, REBOOT_DOWNTIME, stay_lost=p.stay_lost, kind="reboot")


def on_power_cycle(w: Stage, p: scenario.RestartPayload, node: state.SimNode) -> None:
    _restart(w, node, POWER_CYCLE_DOWNTIME, stay_lost=p.stay_lost, kind="power_cycle")


def _restart(
    w: Stage, node: state.SimNode, downtime: timedelta, *, stay_lost: bool, kind: str
) -> None:
    _fail_workloads(w, node)
    for gpu in node.gpus:
        _power_on_gpu(gpu, stay_lost=stay_lost, retrain_link=kind == "power_cycle")
        gpu.registered = gpu.offered = gpu.registered and _visible(node, gpu)
    node.reboot_hung = False
    node.allocatable_dip_until = None
    node.down_until = w.clock.now() + downtime
    w.set_ready(node, False)
    w.record(
        kind,
        node.name,
        f"down for {durations.format_duration(downtime)}"
        + (" (lost GPUs stay lost)" if stay_lost else ""),
    )
    w.touch(node)


def boot_complete(w: Stage, node: state.SimNode) -> None:
    now = w.clock.now()
    w.memory.boots[node.name] = w.memory.boots.get(node.name, 0) + 1
    node.boot_id = state.new_boot_id(f"{node.name}/boot/{w.memory.boots[node.name]}")
    node.booted_at = now
    node.down_until = None
    node.kernel_release = node.pending_kernel_release or node.kernel_release
    node.pending_kernel_release = None
    node.driver_module = node.driver_library
    node.ipvs_loaded = node.ipvs_persisted and node.ipvs_module_available
    node.kube_proxy_ready = node.ipvs_loaded
    node.exporter_started = now
    node.nvreg_active = set(node.nvreg_configured)
    for gpu in node.gpus:
        gpu.registered = gpu.offered = gpu.registered and _visible(node, gpu)
    w.memory.announced = {a for a in w.memory.announced if a[0] != node.name}
    w.log_kernel(
        node,
        [
            kernel_lines.boot_banner(node.kernel_release),
            kernel_lines.module_loaded(node.driver_module),
        ],
    )
    w.set_ready(node, True)
    w.record(
        "boot_complete",
        node.name,
        (
            f"boot ID {node.boot_id[:8]}, kernel {node.kernel_release}, module "
            f"{node.driver_module}, ip_vs {'loaded' if node.ipvs_loaded else 'NOT loaded'}, "
            f"GPUs {node.gpu_allocatable}/{node.gpu_capacity}"
        ),
    )
    w.touch(node)


def on_driver_upgrade(
    w: Stage, p: scenario.DriverUpgradePayload, node: state.SimNode
) -> None:
    old = node.driver_module
    node.driver_library = p.version
    node.pending_kernel_release = p.kernel or node.pending_kernel_release
    if p.method == "operator":
        node.driver_module = p.version
        _dip(w, node, p.dip, 0)
        _restart_device_plugin(w, node)
        _restart_exporter(w, node)
        detail = f"driver {old} -> {p.version} by the GPU Operator (allocatable dip)"
    else:
        w.log_kernel(node, kernel_lines.api_mismatch(p.version, old))
        kernel = f", kernel {p.kernel} at next boot" if p.kernel else ""
        detail = f"NVML library {p.version} now, kernel module {old} until reboot{kernel}"
    w.record("driver_upgrade", node.name, detail)
    w.touch(node)


def on_mig_reconfig(w: Stage, p: scenario.DipPayload, node: state.SimNode) -> None:
    _dip(w, node, p.dip, p.gpus)
    w.record("mig_reconfig", node.name, f"allocatable dips for {durations.format_duration(p.dip)}")
    w.touch(node)


def _dip(w: Stage, node: state.SimNode, length: timedelta, gpus: int) -> None:
    node.allocatable_dip_until = w.clock.now() + length
    node.allocatable_dip_gpus = gpus


def on_dcgm_exporter_restart(w: Stage, _p: scenario.NodePayload, node: state.SimNode) -> None:
    _restart_exporter(w, node)
    w.record("dcgm_exporter_restart", node.name, "Xid gauges empty until the next Xid")
    w.touch(node)


def on_device_plugin_restart(w: Stage, _p: scenario.NodePayload, node: state.SimNode) -> None:
    _restart_device_plugin(w, node)
    w.record(
        "device_plugin_restart",
        node.name,
        f"GPUs re-enumerated: allocatable {node.gpu_allocatable}/{node.gpu_capacity}",
    )
    w.touch(node)


def on_gfd_restart(w: Stage, p: scenario.CountPayload, node: state.SimNode) -> None:
    node.gfd_restarts += p.count
    w.record(
        "gfd_restart", node.name, f"gpu-feature-discovery restarted ({node.gfd_restarts} restarts)"
    )
    w.touch(node)


def _restart_exporter(w: Stage, node: state.SimNode) -> None:
    for gpu in node.gpus:
        gpu.xid_last = None
        gpu.xid_last_msg = ""
    node.exporter_started = w.clock.now()
    w.count_restart(node.name, "dcgm-exporter")


def _restart_device_plugin(w: Stage, node: state.SimNode) -> None:
    """A (re)started device plugin rebuilds its device list from NVML enumeration and
    reports every device Healthy (k8s-device-plugin v0.20.0 internal/rm: "there is no way to
    recover from the Unhealthy state" except a restart, which re-advertises the GPU); an
    instance started with NVIDIA_VISIBLE_DEVICES set to a subset sees only that subset
    (k8s-device-plugin issues #81, #197)."""
    for gpu in node.gpus:
        gpu.registered = gpu.offered = gpu.on_bus and _visible(node, gpu)
    w.count_restart(node.name, "device-plugin")


def _visible(node: state.SimNode, gpu: state.SimGpu) -> bool:
    if gpu.uuid in node.nvreg_active:
        return False
    kind, _, visible = node.plugin_instance.partition(":")
    if kind == NO_PLUGIN:
        return False
    # The chart's instance runs with NVIDIA_VISIBLE_DEVICES=<its indices>: the NVIDIA runtime
    # gives it only those GPUs (k8s-device-plugin issues #81, #197).
    return kind != EXCLUDING_INSTANCE or str(gpu.index) in visible.split("-")


def on_gpu_slow(w: Stage, p: scenario.GpuSlowPayload, node: state.SimNode) -> None:
    gpu = node.gpu(p.gpu)
    gpu.throughput_share = p.share
    w.record("gpu_slow", node.name, f"GPU {gpu.index}: matmul at {p.share:.0%} of expected")


def on_nvreg_exclude(w: Stage, p: scenario.GpuPayload, node: state.SimNode) -> None:
    """A person adds the GPU to ``NVreg_ExcludedGpus`` in /etc/modprobe.d: nothing changes
    until the module loads again, at the next boot."""
    gpu = node.gpu(p.gpu)
    node.nvreg_configured.add(gpu.uuid)
    w.record("nvreg_exclude", node.name, f"NVreg_ExcludedGpus={gpu.uuid}: from the next boot")


def select_device_plugin(w: Stage, node: state.SimNode, instance: str) -> None:
    """The node's device-plugin DaemonSets follow its labels: when the label moves the node
    from one DaemonSet's node selector to the other's, the DaemonSet controller deletes the
    old pod and creates the new one (Kubernetes docs, DaemonSet: "If node labels are changed,
    the DaemonSet will promptly add Pods to newly matching nodes and delete Pods from newly
    not-matching nodes"). The new instance starts like any plugin start."""
    if node.plugin_instance == instance:
        return
    node.plugin_instance = instance
    _restart_device_plugin(w, node)
    w.record(
        "device_plugin_switch",
        node.name,
        f"device plugin instance {instance!r}: allocatable "
        f"{node.gpu_allocatable}/{node.gpu_capacity}",
    )
    w.touch(node)


def on_host_job(w: Stage, p: scenario.HostJobPayload, node: state.SimNode) -> None:
    """A job started on the host with docker, outside Kubernetes: no device plugin, no
    scheduler. It gets a CUDA context unless the GPU is gone or its compute mode is
    PROHIBITED ("No contexts can be created on this device": cudaErrorDevicesUnavailable)."""
    gpu = node.gpu(p.gpu)
    if not gpu.on_bus or gpu.uuid in node.nvreg_active:
        w.record("host_job", node.name, f"{p.name} fails on GPU {gpu.index}: no such device")
    elif gpu.compute_mode == "PROHIBITED":
        w.record(
            "host_job",
            node.name,
            f"{p.name} fails on GPU {gpu.index}: cudaErrorDevicesUnavailable "
            "(compute mode PROHIBITED)",
        )
    else:
        node.host_jobs[p.name] = gpu.index
        w.record("host_job", node.name, f"{p.name} Running on GPU {gpu.index} (outside Kubernetes)")


# ---- host configuration --------------------------------------------------------------------------


def on_kube_proxy_down(w: Stage, _p: scenario.NodePayload, node: state.SimNode) -> None:
    node.kube_proxy_ready = False
    node.ipvs_loaded = False
    w.record("kube_proxy_down", node.name, "kube-proxy not Ready: ip_vs not loaded")
    w.touch(node)


def on_ipvs_unpersist(w: Stage, _p: scenario.NodePayload, node: state.SimNode) -> None:
    node.ipvs_persisted = False
    w.record("ipvs_unpersist", node.name, "/etc/modules-load.d/ipvs.conf removed")
    w.touch(node)


def on_ipvs_load(w: Stage, p: scenario.IpvsLoadPayload, node: state.SimNode) -> None:
    if not node.ipvs_module_available:
        w.record("ipvs_load", node.name, "modprobe ip_vs: module not found")
        return
    node.ipvs_loaded = node.kube_proxy_ready = True
    node.ipvs_persisted = node.ipvs_persisted or p.persist
    persisted = "persisted" if node.ipvs_persisted else "not persisted"
    w.record("ipvs_load", node.name, f"modprobe ip_vs; kube-proxy Ready ({persisted})")
    w.touch(node)


def on_dns_upstream(w: Stage, p: scenario.DnsUpstreamPayload, node: state.SimNode) -> None:
    node.dns_servers = tuple(p.servers)
    if p.stub is not None:
        node.resolv_stub = p.stub
    w.record("dns_upstream", node.name, "upstream DNS " + ", ".join(p.servers))
    w.touch(node)


def on_prometheus_down(w: Stage, p: scenario.PrometheusDownPayload, _node: None) -> None:
    w.prometheus_down_until = w.clock.now() + p.duration
    w.record(
        "prometheus_down",
        None,
        f"Prometheus unreachable for {durations.format_duration(p.duration)}",
    )


def on_exporter_down(w: Stage, p: scenario.ExporterDownPayload, node: state.SimNode) -> None:
    """The node's dcgm-exporter stops answering (its scrape fails: ``up == 0``, its series go
    stale) while the node and its GPUs carry on."""
    node.exporter_down_until = w.clock.now() + p.duration
    w.record(
        "exporter_down", node.name,
        f"dcgm-exporter silent for {durations.format_duration(p.duration)}",
    )  # fmt: skip


def on_job_hang(w: Stage, p: scenario.JobHangPayload, node: state.SimNode) -> None:
    """The next Job of kind ``p.job`` on the node runs until its deadline (``sim.kubelet``)."""
    w.memory.job_hangs.add((node.name, p.job))
    w.record("job_hang", node.name, f"the next {p.job} Job on this node will hang")


# ---- humans, through the API ---------------------------------------------------------------------

KUBECTL = "kubectl-"
"""kubectl's field manager is ``kubectl-<command>`` (kubectl cordon, annotate, ...)."""


def on_cordon(w: Stage, p: scenario.CordonPayload, node: state.SimNode) -> None:
    patch: kube_objects.Obj = {"spec": {"unschedulable": True}}
    if p.key:
        patch["metadata"] = {"annotations": {p.key: p.value or ""}}
    w.store.merge_patch("Node", "", node.name, patch, manager=KUBECTL + "cordon")
    w.record("cordon", node.name, "a human cordons" + (f" ({p.key})" if p.key else ""))


def on_uncordon(w: Stage, _p: scenario.NodePayload, node: state.SimNode) -> None:
    w.store.merge_patch(
        "Node", "", node.name, {"spec": {"unschedulable": None}}, manager=KUBECTL + "uncordon"
    )
    w.record("uncordon", node.name, "a human uncordons")


def on_annotate(w: Stage, p: scenario.AnnotatePayload, node: state.SimNode) -> None:
    patch = {"metadata": {"annotations": {p.key: p.value}}}
    w.store.merge_patch("Node", "", node.name, patch, manager=KUBECTL + "annotate")
    action = f"{p.key}={p.value}" if p.value is not None else f"{p.key} removed"
    w.record("annotate", node.name, f"a human annotates {action}")


# ---- workloads -----------------------------------------------------------------------------------


def on_workload(w: Stage, p: scenario.WorkloadPayload, node: state.SimNode) -> None:
    name = p.name or f"{p.profile.value.replace('_', '-')}-{len(w.memory.pods):04d}"
    count = p.gpus if isinstance(p.gpus, int) else len(p.gpus)
    pod = kube_objects.workload_pod(name, p.namespace, count, p.profile.value, w.clock.now())
    w.memory.pods[name] = (p.namespace, p.outcome)
    problem = _placement_problem(w, node)
    gpus = _free_gpus(w, node, p.gpus)
    if problem or gpus is None:
        reason = problem or f"0/1 nodes are available: Insufficient {kube_objects.GPU_RESOURCE}"
        w.store.create("Pod", p.namespace, kube_objects.unschedulable(pod, reason))
        w.record("workload", node.name, f"{name} Pending: {reason}")
        return
    if any(not g.on_bus for g in node.gpus if g.registered):
        w.store.create("Pod", p.namespace, kube_objects.admission_failed(pod, node.name))
        w.record("workload", node.name, f"{name} Failed: UnexpectedAdmissionError")
        return
    _start_workload(w, node, p, name, pod, gpus)


def _placement_problem(w: Stage, node: state.SimNode) -> str | None:
    spec = w.store.get("Node", "", node.name).get("spec", {})
    if spec.get("unschedulable"):
        return "0/1 nodes are available: node is unschedulable"
    if not node.ready:
        return "0/1 nodes are available: node is not ready"
    return None


def _free_gpus(
    w: Stage, node: state.SimNode, wanted: int | list[int]
) -> tuple[int, ...] | None:
    free = [
        g.index
        for g in node.gpus
        if g.registered and g.offered and node.workload_on(g.index) is None
    ]
    withheld = node.gpu_allocatable - node.gpu_allocatable_at(w.clock.now())
    free = free[: max(0, len(free) - withheld)]
    if isinstance(wanted, int):
        return topology.preferred(node, free, wanted)
    return tuple(wanted) if set(wanted) <= set(free) else None


def _start_workload(
    w: Stage,
    node: state.SimNode,
    p: scenario.WorkloadPayload,
    name: str,
    pod: kube_objects.Obj,
    gpus: tuple[int, ...],
) -> None:
    now = w.clock.now()
    w.store.create("Pod", p.namespace, kube_objects.bound(pod, node.name, now))
    ends = now + p.duration if p.duration is not None else None
    node.workloads.append(
        state.Workload(
            pod=name, namespace=p.namespace, gpus=gpus, profile=p.profile, started=now, ends=ends
        )
    )
    cleared = [i for i in gpus if node.gpu(i).phantom]
    for index in cleared:
        node.gpu(index).phantom = False
    note = f"; phantom cleared on GPU {cleared}" if cleared else ""
    w.record("workload", node.name, f"{name} Running on GPU {list(gpus)} ({p.profile.value}){note}")


def finish_workload(
    w: Stage, node: state.SimNode, workload: state.Workload, outcome: str | None = None
) -> None:
    node.workloads.remove(workload)
    result = outcome or w.memory.pods.get(workload.pod, ("", "Succeeded"))[1]
    status = kube_objects.finished_status(result, workload.started, w.clock.now())
    try:
        w.store.merge_patch("Pod", workload.namespace, workload.pod, {"status": status})
    except store.StoreNotFound:  # deleted through the API (an eviction): nothing to finish
        w.record("workload_end", node.name, f"{workload.pod} gone (deleted through the API)")
        return
    w.record("workload_end", node.name, f"{workload.pod} {result}")


def _fail_workloads(w: Stage, node: state.SimNode, gpu: int | None = None) -> None:
    """Fail the workloads of the node, or only those holding GPU ``gpu``; host jobs too."""
    for workload in [job for job in node.workloads if gpu is None or gpu in job.gpus]:
        finish_workload(w, node, workload, outcome="Failed")
    for name, index in list(node.host_jobs.items()):
        if gpu is None or index == gpu:
            del node.host_jobs[name]
            detail = f"{name} on GPU {index} Failed (outside Kubernetes)"
            w.record("host_job_end", node.name, detail)


def _announce(w: Stage, node: state.SimNode, gpu: state.SimGpu) -> None:
    if (node.name, gpu.index) not in w.memory.announced:
        w.memory.announced.add((node.name, gpu.index))
        w.log_kernel(node, [kernel_lines.gpu_at(gpu.pci, gpu.uuid)])


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
    gpu.compute_mode = "DEFAULT"
    gpu.recovery_action = "None"
    if gpu.fabric_state != "N/A":  # Fabric Manager registers the GPU at boot
        gpu.fabric_state, gpu.fabric_status = "Completed", "Success"


# ---- change management (docs/change-management.md) ---------------------------------------------


def on_host_config(w: Stage, p: scenario.HostConfigPayload, node: state.SimNode) -> None:
    """A host setting people configured; ip_vs persistence acts at the next boot."""
    if p.ip_vs_persisted is not None:
        node.ipvs_persisted = p.ip_vs_persisted
        w.record("host_config", node.name, "ip_vs " + ("persisted" if p.ip_vs_persisted else
                 "not persisted: the next boot loads no ip_vs"))
        w.touch(node)


def on_rollout(w: Stage, p: scenario.RolloutPayload, _node: None) -> None:
    """A person declares a change (``kubectl apply`` of the change ConfigMap); the world's
    applying tool learns what the change installs."""
    spec: dict[str, object] = {"waves": p.waves, "canary": p.canary}
    spec |= {k: v for k, v in (("driver", p.driver), ("kernel", p.kernel),
                               ("max_unavailable", p.max_unavailable),
                               ("min_available", p.min_available), ("checks", p.checks),
                               ("job_template", p.job_template))
             if v is not None}
    if p.job_template is not None:
        spec["method"] = "job"
        _admin_templates(w, p.job_template)
    configmap = {"metadata": {"name": p.name, "namespace": p.namespace,
                              "labels": {CHANGE_LABEL: p.name}},
                 "data": {"change.yaml": yaml.safe_dump(spec, sort_keys=True)}}
    w.store.create("ConfigMap", p.namespace, configmap, manager=KUBECTL + "client-side-apply")
    w.memory.playbooks[p.name] = (p.driver, p.kernel)
    w.record("rollout", None, f"change {p.name} declared: driver {p.driver}, kernel {p.kernel},"
             f" waves {p.waves}, canary {p.canary or 'chosen'}")


CHANGE_LABEL = "gpuguard.io/change"  # the label a change ConfigMap carries
# ---- scheduling and interconnect health (docs/fleet-health.md) -----------------------------------


def on_gang_job(w: Stage, p: scenario.GangJobPayload, _node: None) -> None:
    """A job of ``p.pods`` pods placed as its scheduler would (``sim.gangs``): bound pods run
    a training profile on their GPUs; the others wait Pending (or gated, Kueue)."""
    now = w.clock.now()
    placed = gangs.plan(w, p, now)
    owner = gangs.owner_object(p, now)
    uid = w.store.create("Job", p.namespace, owner)["metadata"]["uid"] if owner else None
    for index, where in enumerate(placed):
        pod = gangs.pod_object(p, index, now, uid)
        name = pod["metadata"]["name"]
        w.memory.pods[name] = (p.namespace, "Succeeded")
        node = next((n for n in w.nodes if n.name == where), None)
        if node is None:
            w.store.create("Pod", p.namespace, gangs.waiting(pod, p, len(w.nodes), now))
            continue
        gpus = gangs.gpus_for(node, p.gpus_per_pod)
        w.store.create("Pod", p.namespace, kube_objects.bound(pod, node.name, now))
        ends = now + p.duration if p.duration is not None else None
        profile = state.WorkloadProfile.TRAINING
        node.workloads.append(state.Workload(name, p.namespace, gpus, profile, now, ends))
    w.record("gang_job", None, f"{p.name} ({p.scheduler} scheduler): {gangs.summary(placed)}")


def on_throttle(w: Stage, p: scenario.ThrottlePayload, node: state.SimNode) -> None:
    """The GPU's clock-event reasons include ``p.reason``'s bit for ``p.duration``."""
    now = w.clock.now()
    bit = mn.CLOCK_EVENT_REASON_BITS[p.reason]
    node.gpu(p.gpu).clock_events.append((now, now + p.duration, bit))
    span = durations.format_duration(p.duration)
    w.record("throttle", node.name, f"GPU {p.gpu}: {p.reason} clock events for {span}")


def on_nvlink_errors(w: Stage, p: scenario.NvlinkErrorsPayload, node: state.SimNode) -> None:
    now = w.clock.now()
    node.gpu(p.gpu).nvlink_errors.append((now, now + p.duration, p.rate, p.counter))
    span = durations.format_duration(p.duration)
    detail = f"GPU {p.gpu}: NVLink {p.counter} errors {p.rate:g}/min for {span}"
    w.record("nvlink_errors", node.name, detail)


def on_ib_flap(w: Stage, p: scenario.IbFlapPayload, node: state.SimNode) -> None:
    """The port goes down ``p.count`` times, ``p.every`` apart, from now (link_downed +1 each)."""
    now = w.clock.now()
    node.ib_link_downs.extend((now + p.every * k, p.port) for k in range(p.count))
    w.record("ib_flap", node.name, f"InfiniBand {p.port} goes down {p.count} times")


ADMIN_TEMPLATES = ("kube-system", "gpuguard-change-templates")  # the chart's default
INSTALLER_SCRIPT = ('nsenter -t 1 -m -u -i -n -p -- apt-get install -y '
                    '"nvidia-driver-580-server=$GPUGUARD_DRIVER" '
                    '"linux-image-$GPUGUARD_KERNEL" && nsenter -t 1 -m -- shutdown -r +1\n')


def _admin_templates(w: Stage, name: str) -> None:
    """The cluster admin approved a privileged installer template once (their ConfigMap,
    docs/change-management.md#how-a-node-is-changed)."""
    namespace, configmap = ADMIN_TEMPLATES
    data = {f"{name}.image": "registry.example/ops/host-apt:1", f"{name}.script": INSTALLER_SCRIPT,
            f"{name}.privileged": "true"}
    try:
        found = w.store.get("ConfigMap", namespace, configmap)
    except store.StoreNotFound:
        meta = {"name": configmap, "namespace": namespace}
        w.store.create("ConfigMap", namespace, {"metadata": meta, "data": data},
                       manager=KUBECTL + "client-side-apply")
        return
    merged = {**(found.get("data") or {}), **data}
    w.store.merge_patch("ConfigMap", namespace, configmap, {"data": merged},
                        manager=KUBECTL + "client-side-apply")

# ---- the table -----------------------------------------------------------------------------------

Reaction = Callable[[Stage, Any, Any], None]
"""``reaction(stage, payload, node)``: the payload is the kind's model in ``scenario.PAYLOADS``;
the node is None only for fleet-wide kinds (``prometheus_down``)."""

REACTIONS: Mapping[str, Reaction] = {
    "xid": on_xid,
    "gpu_lost": on_gpu_lost,
    "dbe": on_dbe,
    "phantom": on_phantom,
    "phantom_clear": on_phantom_clear,
    "workload": on_workload,
    "reboot": on_reboot,
    "power_cycle": on_power_cycle,
    "gpu_reset": on_gpu_reset,
    "driver_upgrade": on_driver_upgrade,
    "pcie_degrade": on_pcie_degrade,
    "dcgm_exporter_restart": on_dcgm_exporter_restart,
    "device_plugin_restart": on_device_plugin_restart,
    "gfd_restart": on_gfd_restart,
    "mig_reconfig": on_mig_reconfig,
    "kube_proxy_down": on_kube_proxy_down,
    "ipvs_unpersist": on_ipvs_unpersist,
    "ipvs_load": on_ipvs_load,
    "dns_upstream": on_dns_upstream,
    "cordon": on_cordon,
    "uncordon": on_uncordon,
    "annotate": on_annotate,
    "prometheus_down": on_prometheus_down,
    "bad_metric": on_bad_metric,
    "forged_metric": on_forged_metric,
    "exporter_down": on_exporter_down,
    "job_hang": on_job_hang,
    "host_job": on_host_job,
    "nvreg_exclude": on_nvreg_exclude,
    "host_config": on_host_config,
    "rollout": on_rollout,
    "gpu_slow": on_gpu_slow,
    "gang_job": on_gang_job,
    "throttle": on_throttle,
    "nvlink_errors": on_nvlink_errors,
    "ib_flap": on_ib_flap,
    "sxid": on_sxid,
    "fabric": on_fabric,
    "gpu_recovery": on_gpu_recovery,
}
