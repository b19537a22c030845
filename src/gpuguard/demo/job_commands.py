"""Runs the command of a gpuguard Job inside the simulated node, as its container would.

``gpuguard evidence`` is the real collector, reading the node's host tree (the simulator
writes it) mounted at ``--root``. ``gpuguard burnin`` is the real burn-in (timing, checks,
report) over the node's simulated GPUs: each GPU still on the bus runs at its share of its
model's expected throughput (``gpu_slow`` lowers it), so a GPU that did not come back is
missing from the count; ``--uuid`` burns in that GPU alone. The
result is what the container writes to its termination message. Host programs (journalctl,
nvidia-smi, dcgmi) do not exist in a host tree, as on a host without them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuguard.agent import gpu_isolation as host_isolation
from gpuguard.agent.burnin import hardware, running
from gpuguard.agent.evidence import collect
from gpuguard.catalog import gpu_models
from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import ports
from gpuguard.policy import burnin
from gpuguard.sim import change_tool, reactions, scenario, state, world


class NoHostPrograms:
    """A CommandRunner for a host tree: every program is missing (exit 127)."""

    def run(self, argv: Sequence[str], *, timeout_s: float) -> ports.CommandResult:
        return ports.CommandResult(tuple(argv), 127, "", f"{argv[0]}: not found")


@dataclass
class SimulatedGpus:
    """The burn-in's backend for a simulated node: its GPUs on the bus, no CUDA needed."""

    node: state.SimNode
    table: gpu_models.GpuModelTable
    kind: str = "cuda"

    def devices(self) -> list[hardware.DeviceInfo]:
        return [hardware.DeviceInfo(g.index, g.model, g.uuid) for g in self.node.gpus if g.on_bus]

    def matmul_tflops(
        self, device: hardware.DeviceInfo, size: int, dtype: gpu_models.Dtype, d: float
    ) -> float:
        share = next(g.throughput_share for g in self.node.gpus if g.index == device.index)
        return (self.table.expected(device.name, dtype) or 100.0) * share

    def pattern_errors(self, device: hardware.DeviceInfo, fraction: float) -> int:
        return 0


@dataclass
class SimulatedDriver:
    """The isolation Job's GpuControl on a simulated node: ``nvidia-smi -c`` sets the GPU's
    compute mode (a GPU off the bus does not answer), and the host's exclusion list is the
    node's record of isolated GPUs."""

    node: state.SimNode

    def compute_modes(self) -> dict[str, str]:
        return {g.uuid: g.compute_mode for g in self._attached()}

    def set_compute_mode(self, uuid: str, mode: str) -> None:
        gpu = next((g for g in self._attached() if g.uuid == uuid), None)
        if gpu is None:
            raise host_isolation.HostError(f"nvidia-smi -i {uuid}: No devices were found")
        gpu.compute_mode = mode

    def excluded(self) -> set[str]:
        return set(self.node.excluded_uuids)

    def write_excluded(self, uuids: set[str]) -> None:
        self.node.excluded_uuids = set(uuids)

    def remap_pending(self, uuid: str) -> bool | None:
        gpu = next((g for g in self._attached() if g.uuid == uuid), None)
        if gpu is None:
            raise host_isolation.HostError(f"nvidia-smi -i {uuid}: No devices were found")
        return gpu.row_remap_pending > 0

    def _attached(self) -> list[state.SimGpu]:
        """GPUs the driver answers for: on the bus, not excluded at module load."""
        return [g for g in self.node.gpus if g.on_bus and g.uuid not in self.node.nvreg_active]


def _gpu_isolate(
    node: state.SimNode, argv: list[str], hosts_root: Path, xid_overrides: Path | None
) -> tuple[int, str]:
    """``--xid-overrides`` names the mounted ConfigMap, which holds the controller's file."""
    uuids = [argv[i + 1] for i in range(len(argv) - 1) if argv[i] == "--uuid"]
    step = host_isolation.apply if argv[2] == "apply" else host_isolation.undo
    mounted = xid_overrides if "--xid-overrides" in _flags(argv) else None
    classes = xid_catalog.load_catalog(mounted)
    report = step(SimulatedDriver(node), uuids, hosts_root / node.name, classes)
    return (0 if report.ok else 1), report.to_json()


def _flags(argv: Sequence[str]) -> dict[str, str]:
    return {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}


def _burnin(node: state.SimNode, argv: list[str]) -> tuple[int, str]:
    flags = _flags(argv)
    table = gpu_models.load_table()
    request = running.BurninRequest(
        mode=burnin.Mode(flags.get("--mode", "auto")),
        expected_gpus=int(flags["--expected-gpus"]),
        xid=burnin.parse_reason(flags.get("--reason")),
        duration_s=0.01,
        size=64,
        uuid=flags.get("--uuid"),
    )
    env = running.Environment(
        load_backend=lambda _: SimulatedGpus(node, table),
        runner=NoHostPrograms(),
        which=lambda _: None,
        table=table,
    )
    report = running.run(request, env)
    return (0 if report.passed else 1), report.summary()


def runner(
    played: world.World, hosts_root: Path, xid_overrides: Path | None = None
) -> Callable[[state.SimNode, list[str]], tuple[int, str]]:
    """``xid_overrides``: the controller's override file (the chart's ConfigMap holds it)."""
    catalog = xid_catalog.load_catalog()

    def run(node: state.SimNode, argv: list[str]) -> tuple[int, str]:
        if argv[:2] == ["gpuguard", "evidence"]:
            options = collect.CollectOptions(node=node.name)
            bundle = collect.collect(
                hosts_root / node.name, options, NoHostPrograms(), catalog, played.now
            )
            return 0, termination_message(argv, bundle.summary().to_json())
        if argv[:2] == ["gpuguard", "gpu-isolate"]:
            code, report = _gpu_isolate(node, argv, hosts_root, xid_overrides)
            return code, termination_message(argv, report)
        if argv[:2] == ["gpuguard", "burnin"]:
            code, summary = _burnin(node, argv)
            return code, termination_message(argv, summary)
        if argv[:3] == ["nvidia-smi", "-r", "-i"] and len(argv) == 4:  # the GPU-reset Job
            return gpu_reset(played, node, argv[3])
        if argv[:2] == ["/bin/sh", "-c"]:  # a change's Job: the admin's template's script
            return change_tool.run_job(played, node)
        return 2, f"the simulated node cannot run {' '.join(argv[:2])!r}"

    return run


def gpu_reset(played: world.World, node: state.SimNode, uuid: str) -> tuple[int, str]:
    """``nvidia-smi -r -i <uuid>`` on the simulated node: the simulator's own reset
    (``sim.reactions.on_gpu_reset``, the reset a person does in the scenarios). Per NVIDIA, a
    GPU reset re-initialises the GPU's hardware and software state "in situations that would
    otherwise require a machine reboot" and fails while any process holds the GPU (nvidia-smi(1)
    ``-r``, https://manpages.ubuntu.com/manpages/plucky/man1/nvidia-smi.1.html); a GPU gone
    from the bus cannot be reached at all (NVIDIA's Xid catalog, Xid 79: "GPU has fallen off
    the bus", https://docs.nvidia.com/deploy/xid-errors/) and needs a power cycle. So a reset
    clears the transient state (Xid, pending remap, compute mode, the driver's recovery
    action) but not a hardware fault: a failed row remap stays, a GPU off the bus fails it."""
    gpu = next((g for g in node.gpus if g.uuid == uuid), None)
    if gpu is None:
        return 6, f"No devices were found matching {uuid}"  # nvidia-smi's "not found" status
    if node.gpu_reset == "fails":  # the scenario's override: the reset does not happen
        return 255, f"Unable to reset GPU {uuid}: the reset did not complete"
    if any(gpu.index in w.gpus for w in node.workloads):
        return 255, f"Unable to reset GPU {uuid}: in use by another client"
    reset_ok = gpu.on_bus
    reactions.on_gpu_reset(played, scenario.GpuPayload(node=node.name,
                                                        gpu=gpu.index), node)  # fmt: skip
    if not reset_ok:
        return 255, f"Unable to reset GPU {uuid}: the GPU is not reachable"
    return 0, f"GPU {gpu.pci} was successfully reset."


def termination_message(argv: Sequence[str], summary: str) -> str:
    """What Kubernetes reads as the container's termination message: only what the command
    wrote to ``/dev/termination-log`` (stdout is the log, not the message)."""
    return summary if _flags(argv).get("--summary-file") == TERMINATION_LOG else ""


TERMINATION_LOG = "/dev/termination-log"
