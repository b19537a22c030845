"""``gpuguard agent``: the node DaemonSet — Xid counters from the kernel log, checks as metrics.

Parses the flags, builds the kernel-log follower and the check run, and hands them to
``agent.daemon.Agent`` with the /metrics + /healthz server of ``gpuguard.metrics_http``.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer

from gpuguard import errors, metrics_http
from gpuguard.agent import commands, daemon, journal, node_status, position
from gpuguard.agent import topology as agent_topology
from gpuguard.agent.checks import registry, running, settings
from gpuguard.cli import check as check_cli
from gpuguard.cli import failures, inputs
from gpuguard.model import bounds

DEFAULT_PORT = 9809
DEFAULT_STATE_DIR = Path("/var/lib/gpuguard")


def _follower_factory(
    root: Path, kernel_log: Path | None, use_journal: bool, use_kmsg: bool
) -> daemon.FollowerFactory:
    if (kernel_log is not None) + use_journal + use_kmsg > 1:
        raise typer.BadParameter(
            "choose one of --kernel-log FILE, --journal, --kmsg", param_hint="--kernel-log"
        )
    if kernel_log is not None:
        return functools.partial(journal.FileFollower, kernel_log)
    if use_kmsg:
        return functools.partial(
            _kmsg, device=root / "dev/kmsg", boot_id=root / "proc/sys/kernel/random/boot_id"
        )
    return functools.partial(_journal, root=root)


def _journal(start: position.Position | None, *, root: Path) -> journal.Follower:
    return journal.JournalFollower(start, root=root)


def _kmsg(start: position.Position | None, *, device: Path, boot_id: Path) -> journal.Follower:
    return journal.KmsgFollower(start, device=device, boot_id_path=boot_id)


NodeOption = Annotated[
    str | None, typer.Option(
        parser=inputs.node_name, help="This node's name for the labels (default: $NODE_NAME).")
]
KernelLogOption = Annotated[
    Path | None,
    typer.Option("--kernel-log", help="Follow this file instead of journald/kmsg."),
]
JournalOption = Annotated[
    bool, typer.Option("--journal", help="Follow journalctl -k -f (the default).")
]
KmsgOption = Annotated[bool, typer.Option("--kmsg", help="Follow /dev/kmsg under --root.")]
StateDirOption = Annotated[
    Path, typer.Option(help="Where the read position and counts survive restarts.")
]
IntervalOption = Annotated[timedelta, typer.Option(
    parser=inputs.duration(shortest=timedelta(seconds=1)), metavar=inputs.DURATION,
    show_default="5m", help="How often the host checks run, e.g. 5m.",
)]  # fmt: skip
PortOption = Annotated[int, typer.Option(min=1, max=65535, help="Port for /metrics and /healthz.")]
HostOption = Annotated[str, typer.Option(help="Address to listen on.")]
PodResourcesOption = Annotated[
    Path | None,
    typer.Option(help="The kubelet's PodResources socket: export which pods hold each GPU."),
]
DeclaredOption = Annotated[Path | None, typer.Option(
    help="A directory whose driver/kernel files declare the versions (override --driver-version "
    "and --kernel-version), read at every check run: a mounted ConfigMap updates the "
    "declaration without a restart. docs/change-management.md#declared-versions",
)]  # fmt: skip
TopologyOption = Annotated[bool, typer.Option(
    "--topology",
    help="Also read the GPU topology (nvidia-smi topo -m) every 6 h, never on a hung driver; "
    "needs nvidia-smi in the container (the NVIDIA runtime class). docs/fleet-health.md",
)]  # fmt: skip
GpuStateOption = Annotated[bool, typer.Option(
    "--gpu-state",
    help="Also read each GPU's recovery action and NVLink fabric state (nvidia-smi --query-gpu) "
    "every check cycle, as the checks gpu-recovery and nvlink-fabric, reported as the node "
    "conditions GpuRecoveryRequired and GpuFabricFault: a missed Xid 154 or a Fabric Manager "
    "failure is seen again and isolated; needs the NVIDIA runtime class. docs/xid-events.md",
)]  # fmt: skip
XidOverridesOption = Annotated[Path | None, typer.Option(
    help="The cluster's Xid class override file, the controller's controller.xid_overrides "
    "(see `xid explain --help`): GpuHardwareXid follows the same classes as the controller. "
    "Read once at start; a bad file stops the agent naming it.",
)]  # fmt: skip
ReportOption = Annotated[bool, typer.Option(
    "--report-conditions/--no-report-conditions",
    help="Report what the agent sees as conditions on this node's status (GpuFallenOffBus, "
    "GpuHardwareXid, GpuDriverMismatch, GpuKernelLogUnreadable, GpuRecoveryRequired, "
    "GpuFabricFault; kubectl describe node shows "
    "them), through the pod's service-account token: the controller isolates a GPU gone from "
    "the bus within seconds. Needs the chart's agent.nodeConditions.enabled (RBAC: patch "
    "nodes/status, its own node only). docs/design.md#fast-path",
)]  # fmt: skip


def agent(
    root: check_cli.RootOption = Path("/"),
    node: NodeOption = None,
    kernel_log: KernelLogOption = None,
    use_journal: JournalOption = False,
    use_kmsg: KmsgOption = False,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    check_interval: IntervalOption = timedelta(minutes=5),
    port: PortOption = DEFAULT_PORT,
    listen: HostOption = "0.0.0.0",
    role: check_cli.RoleOption = settings.NodeRole.WORKER,
    control_plane_version: check_cli.VersionOption = None,
    allowed_dns: check_cli.DnsOption = None,
    timeout: check_cli.TimeoutOption = settings.DEFAULT_CHECK_TIMEOUT_S,
    driver_version: check_cli.DriverOption = None,
    kernel_version: check_cli.KernelOption = None,
    declared: DeclaredOption = None,
    pod_resources: PodResourcesOption = None,
    topology: TopologyOption = False,
    gpu_state: GpuStateOption = False,
    xid_overrides: XidOverridesOption = None,
    report_conditions: ReportOption = True,
) -> None:
    """Run the node agent: count Xids from the kernel log, run the host checks every interval.

    Serves gpuguard_xid_total{node,gpu,uuid,pci,xid,rule} (rule: the per-event rule the line
    matched, docs/xid-events.md), gpuguard_xid_rule_hardware, gpuguard_sxid_total,
    gpuguard_gpu_fallen_off_bus_total, gpuguard_xid154_recovery_action,
    gpuguard_check_status{check,status} and
    gpuguard_nvml_mismatch on /metrics. The read position and the counts are saved together
    in --state-dir after each batch is counted, so a restarted agent neither re-counts nor
    loses an Xid and its counters never go down. Never calls NVML, nor nvidia-smi unless asked
    (--topology, --gpu-state); every check has a hard timeout. With --topology it also reads
    nvidia-smi topo -m every 6 h (never while a GPU has fallen off the bus) and serves
    gpuguard_gpu_link and gpuguard_gpu_numa_node. With --gpu-state each check cycle also reads
    the GPUs' recovery action and NVLink fabric state (checks gpu-recovery, nvlink-fabric).
    By default it also reports what it sees as conditions on its own Node's status, at most
    once a second and only on change (--no-report-conditions: metrics only).

    \b
    Examples:
      gpuguard agent --node gpu-node-a                         # journald
      gpuguard agent --root /host --kmsg --state-dir /host/var/lib/gpuguard
      gpuguard agent --kernel-log /var/log/kern.log --check-interval 1m --port 9809
      gpuguard agent --node gpu-node-a --no-report-conditions  # metrics only, no API token
      gpuguard agent --node gpu-node-a --xid-overrides /etc/gpuguard-xid/xid-overrides.yaml
    """
    check_cli.require_dir(root, "--root")
    if kernel_log is not None and not kernel_log.is_file():
        raise errors.InputError(f"--kernel-log {kernel_log}: no such file")
    follow = _follower_factory(root, kernel_log, use_journal, use_kmsg)
    name = _node_name(node)
    check_settings = settings.CheckSettings(
        role=role,
        control_plane_version=check_cli._control_plane(control_plane_version),
        allowed_dns=check_cli._allowed_dns(allowed_dns),
        check_timeout_s=timeout,
        driver_version=driver_version,
        kernel_version=kernel_version,
        declared_dir=declared,
    )
    config = daemon.AgentConfig(
        name, root, state_dir, check_interval.total_seconds(), pod_resources=pod_resources,
        xid_overrides=xid_overrides,
    )
    extra = registry.GPU_STATE_CHECKS if gpu_state else ()
    run = functools.partial(
        running.run_checks, root, check_settings, commands.SubprocessRunner(), False, extra
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        probe = (
            agent_topology.TopologyProbe(name, commands.SubprocessRunner()) if topology else None
        )
        reporter = node_status.in_cluster(name, state_dir) if report_conditions else None
        the_agent = daemon.Agent(config, follow, run, topology=probe, reporter=reporter)
    except OSError as e:
        raise errors.InputError(f"--state-dir {state_dir}: {e.strerror or e}") from e
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with failures.listening("--port", port), metrics_http.serve(
        the_agent.exposition, the_agent.healthy, listen, port, ready=the_agent.ready
    ) as server:
        logging.info("gpuguard agent for %s on :%d", name, server.server_address[1])
        the_agent.run(stop)


def _node_name(node: str | None) -> str:
    """--node, else $NODE_NAME: a Kubernetes node name (InputError naming which)."""
    name = node or os.environ.get("NODE_NAME")
    if not name:
        raise typer.BadParameter("give --node or set NODE_NAME", param_hint="--node")
    try:
        return bounds.object_name(name)
    except errors.InputError as e:
        raise errors.InputError(f"{'--node' if node else 'NODE_NAME'}: {e}") from e
