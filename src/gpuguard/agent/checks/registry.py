"""The ordered list of conformance checks and what each one is given.

Each check module exposes plain functions taking ``root: Path`` plus the settings it needs;
this table adapts them to one calling convention (:class:`CheckContext`) so the runner can
treat them alike. The order is the order of the report: module index before persistence
before the running kernel, so a reader sees causes before symptoms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuguard.agent.checks import (
    dns,
    gpu_state,
    ipvs,
    nvidia,
    result,
    rke2,
    settings,
    swap,
    upgrades,
)
from gpuguard.model import ports


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Everything a check may use: the host root, settings, commands, and the --fix switch."""

    root: Path
    settings: settings.CheckSettings
    runner: ports.CommandRunner
    fix: bool = False


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    run: Callable[[CheckContext], result.CheckResult]
    reads: str  # one line for --help: what the check looks at


CHECKS: tuple[Check, ...] = (
    Check(
        ipvs.RESOLVABLE,
        lambda c: ipvs.check_resolvable(c.root),
        "/lib/modules/<osrelease>/modules.dep, modules.builtin",
    ),
    Check(
        ipvs.PERSIST,
        lambda c: ipvs.check_persist(c.root, fix=c.fix),
        "/etc/modules-load.d/*.conf, /usr/lib/modules-load.d",
    ),
    Check(
        ipvs.LOADED,
        lambda c: ipvs.check_loaded(
            c.root, c.runner, fix=c.fix, timeout_s=c.settings.check_timeout_s / 2
        ),
        "/proc/modules, /sys/module/ip_vs",
    ),
    Check(
        nvidia.NAME,
        lambda c: nvidia.check(c.root),
        "/sys/module/nvidia/version vs libnvidia-ml.so.<version>",
    ),
    Check(
        rke2.UNIT,
        lambda c: rke2.check_unit(c.root, c.settings.role),
        "multi-user.target.wants/rke2-{agent,server}.service",
    ),
    Check(
        rke2.VERSION,
        lambda c: rke2.check_version(c.root, c.settings.control_plane_version),
        "/var/lib/rancher/rke2/bin -> data/<release>-<hash>",
    ),
    Check(
        upgrades.AUTO_UPGRADE,
        lambda c: upgrades.check_auto_upgrade(c.root),
        "APT::Periodic::Unattended-Upgrade, /etc/apt/apt.conf.d",
    ),
    Check(
        upgrades.PACKAGE_PIN,
        lambda c: upgrades.check_package_pin(c.root, *settings.declared_versions(c.settings)),
        "/var/lib/dpkg/status, Package-Blacklist in apt.conf.d",
    ),
    Check(
        dns.NAME,
        lambda c: dns.check(c.root, c.settings.allowed_dns),
        "the resolv.conf RKE2 gives the kubelet",
    ),
    Check(swap.NAME, lambda c: swap.check(c.root), "/proc/swaps"),
)

GPU_STATE_CHECKS: tuple[Check, ...] = (
    Check(
        gpu_state.RECOVERY,
        lambda c: gpu_state.check_recovery(c.runner, c.settings.check_timeout_s),
        "nvidia-smi --query-gpu=gpu_recovery_action",
    ),
    Check(
        gpu_state.FABRIC,
        lambda c: gpu_state.check_fabric(c.runner, c.settings.check_timeout_s),
        "nvidia-smi --query-gpu=fabric.state,fabric.status",
    ),
)
"""Persistent GPU states (``gpu_state``), after the host checks when the agent runs with
``--gpu-state``: they need nvidia-smi in the agent's container (the NVIDIA runtime class)."""
