"""``gpuguard check``: host conformance checks (docs/design.md#host-conformance-and-onboarding), as
a table or JSON, with exit codes.

Parses and validates the flags into ``CheckSettings``, runs ``running.run_checks`` with the real
``SubprocessRunner`` and renders the results. The checks themselves live in
``gpuguard.agent.checks`` so the agent and the onboarding gate run exactly the same code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import rich.console
import rich.table
import rich.text
import typer

from gpuguard import errors
from gpuguard.agent import commands
from gpuguard.agent.checks import registry, result, rke2_release, running, settings
from gpuguard.cli import inputs, output
from gpuguard.model import decisions

STATUS_STYLE = {
    decisions.CheckStatus.PASS: "green",
    decisions.CheckStatus.WARN: "yellow",
    decisions.CheckStatus.FAIL: "bold red",
    decisions.CheckStatus.UNKNOWN: "magenta",
    decisions.CheckStatus.FIXED: "cyan",
}
EXIT_OK, EXIT_FAIL, EXIT_UNKNOWN = 0, 1, 2


def _checks_help() -> str:
    return "\n".join(f"  {check.name:<16} {check.reads}" for check in registry.CHECKS)


INTRO = (
    "Each check reads files under --root (mount the host at /host in a pod) and says PASS, "
    "WARN, FAIL, UNKNOWN or FIXED. UNKNOWN means the input was missing, unreadable or timed "
    "out: it is never counted as a pass."
)
FIX_NOTE = (
    "--fix repairs only ip_vs: it creates /etc/modules-load.d/ipvs.conf when no file lists "
    "ip_vs (never edits an existing file) and runs modprobe. Nothing else is ever changed."
)
HELP = f"""Check that this host is a conformant GPU node (read-only unless --fix).

{INTRO}

\b
Checks and what they read:
{_checks_help()}

\b
Decisions worth knowing:
  nvidia-match  never runs nvidia-smi; GPUs but no nvidia module -> FAIL
  rke2-version  minor differs -> FAIL, patch -> WARN,
                no --control-plane-version -> UNKNOWN
  auto-upgrade  reports only: periodic run on -> WARN, never FAIL
  package-pin   blacklist entries match the start of a name (re.match):
                "nvidia-" misses libnvidia-*; "linux-" hits linux-firmware
  dns-upstream  no --allowed-dns: 10/8, 172.16/12, 192.168/16, 100.64/10
                and fc00::/7 are allowed; a public resolver -> FAIL

{FIX_NOTE}

\b
Exit codes: 0 all PASS/WARN/FIXED, 1 any FAIL, 2 UNKNOWN without FAIL (or a bad flag).

\b
Examples:
  gpuguard check
  gpuguard check --root /host --role worker --control-plane-version v1.31.4+rke2r1 \\
      --allowed-dns 10.0.0.0/8
  gpuguard check --fix -o json
"""


def _control_plane(text: str | None) -> rke2_release.Rke2Release | None:
    if text is None:
        return None
    try:
        return rke2_release.parse(text)
    except errors.InputError as e:
        raise typer.BadParameter(str(e), param_hint="--control-plane-version") from e


def _allowed_dns(text: str | None) -> tuple[settings.Network, ...] | None:
    if text is None:
        return None
    try:
        return settings.parse_allowed_dns(text)
    except errors.InputError as e:
        raise typer.BadParameter(str(e), param_hint="--allowed-dns") from e


def exit_code(results: list[result.CheckResult]) -> int:
    statuses = {check.status for check in results}
    if decisions.CheckStatus.FAIL in statuses:
        return EXIT_FAIL
    if decisions.CheckStatus.UNKNOWN in statuses:
        return EXIT_UNKNOWN
    return EXIT_OK


def summary(results: list[result.CheckResult]) -> str:
    counts = dict.fromkeys(decisions.CheckStatus, 0)
    for check in results:
        counts[check.status] += 1
    parts = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    return f"{len(results)} checks: {parts} (exit {exit_code(results)})"


def render_table(results: list[result.CheckResult], console: rich.console.Console) -> None:
    table = rich.table.Table(show_lines=True)
    for column in ("check", "status", "evidence", "fix"):
        table.add_column(column, overflow="fold")
    for check in results:
        style = STATUS_STYLE[check.status]
        table.add_row(
            rich.text.Text(check.check),
            rich.text.Text(check.status, style=style),
            rich.text.Text(check.evidence),  # Text, not markup: evidence may contain "[...]"
            rich.text.Text(check.fix or ""),
        )
    console.print(table)
    console.print(summary(results))


RootOption = Annotated[Path, typer.Option(help="The host's root directory (/host in a pod).")]
RoleOption = Annotated[
    settings.NodeRole, typer.Option(help="worker runs rke2-agent, server rke2-server.")
]
VersionOption = Annotated[
    str | None, typer.Option(help="The control plane's RKE2 version, e.g. v1.31.4+rke2r1.")
]
DnsOption = Annotated[str | None, typer.Option(help="Comma-separated CIDRs of allowed resolvers.")]
FixOption = Annotated[bool, typer.Option("--fix", help="Repair ip_vs persistence/loading only.")]
DriverOption = Annotated[
    str | None, typer.Option(help="Declared NVIDIA driver (580.159.03): package-pin reports drift.")
]
KernelOption = Annotated[
    str | None, typer.Option(help="Declared kernel release: package-pin reports drift from it.")
]
TimeoutOption = Annotated[float, typer.Option(
    parser=inputs.number(0.1, 3600), metavar="SECONDS",
    help="Seconds each check may take before it is UNKNOWN (0.1 to 3600).",
)]  # fmt: skip


def check(
    root: RootOption = Path("/"),
    role: RoleOption = settings.NodeRole.WORKER,
    control_plane_version: VersionOption = None,
    allowed_dns: DnsOption = None,
    fix: FixOption = False,
    fmt: output.FormatOpt = output.Format.TABLE,
    timeout: TimeoutOption = settings.DEFAULT_CHECK_TIMEOUT_S,
    driver_version: DriverOption = None,
    kernel_version: KernelOption = None,
) -> None:
    require_dir(root, "--root")
    check_settings = settings.CheckSettings(
        role=role,
        control_plane_version=_control_plane(control_plane_version),
        allowed_dns=_allowed_dns(allowed_dns),
        check_timeout_s=timeout,
        driver_version=driver_version,
        kernel_version=kernel_version,
    )
    results = running.run_checks(root, check_settings, commands.SubprocessRunner(), fix=fix)
    if not output.emit([check.as_dict() for check in results], fmt):
        render_table(results, output.console)
    raise typer.Exit(exit_code(results))


def require_dir(path: Path, flag: str) -> Path:
    """``path`` if it is a directory; InputError naming the flag otherwise."""
    if not path.is_dir():
        raise errors.InputError(f"{flag} {path}: no such directory")
    return path


# The help is assembled from the check table, so it is attached after the definition.
check.__doc__ = HELP
