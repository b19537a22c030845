"""``gpuguard evidence``: what the evidence Job runs on an isolated node
(docs/design.md#evidence-and-verdict).

Parses the flags, runs ``agent.evidence.collect.collect`` with the real ``SubprocessRunner``
and prints the bundle: a readable report, the full JSON (``--json``) or the compact summary
(``--summary``, at most 4000 bytes: the Job's termination message). Collection never writes
under ``--root``; ``--summary-file`` writes the summary outside it (``/dev/termination-log``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import rich.console
import rich.table
import rich.text
import typer

from gpuguard import errors
from gpuguard.agent import commands
from gpuguard.agent.evidence import collect, kernel, smi
from gpuguard.catalog import xid as xid_catalog
from gpuguard.cli import check as check_cli
from gpuguard.cli import inputs, output
from gpuguard.model import bounds
from gpuguard.model import evidence as evidence_model

BOOT = "BOOT"

HELP = """Collect the evidence a repair verdict rests on, on this node (read-only).

Run by the evidence Job pinned to an isolated node (host mounted read-only at /host, so
--root /host). It reads, and never writes under the root:

\b
  kernel log    Xid events, Xid 154's recovery action, "fallen off the bus"
                (journalctl -k, else /var/log/kern.log, else dmesg;
                or --kernel-log FILE)
  sysfs         per NVIDIA GPU: does its PCI config space read all ff? link
                width/speed now vs max; the upstream root port's AER counters
  nvidia-smi    -q -d ECC,ROW_REMAPPER under a hard timeout; NOT run when a
                GPU's config space reads ff, an Xid 79 / fall-off is in the
                log, or nvidia-smi is missing (the bundle says why)

Every item is PASS, FAIL or UNKNOWN (unreadable or malformed input: never PASS).

\b
Verdict, first rule that matches (docs/design.md#evidence-and-verdict):
  config space all ff             -> power-cycle
  Xid 79 or fallen off the bus    -> power-cycle
  Xid 48/94/95/119/120, config ok -> gpu-reset
      (driver's Xid 154 says "Node Reboot Required" -> power-cycle)
  Xid 143                         -> rma
  anything else                   -> human-diagnosis
The driver's Xid 154 advice is shown but never outranks config-space evidence.

Exit 0 when collection ran, whatever the verdict; 2 on a bad flag.

\b
Examples:
  gpuguard evidence --root /host --node "$NODE_NAME"
  gpuguard evidence --root /host --summary --summary-file /dev/termination-log
  gpuguard evidence --kernel-log ./kern.log --since 24h --no-nvidia-smi --json
"""

RootOption = Annotated[
    Path,
    typer.Option(
        exists=True, file_okay=False, help="The host's root directory (/host in the Job)."
    ),
]
KernelLogOption = Annotated[
    Path | None,
    typer.Option(
        exists=True, dir_okay=False, help="Read this kernel-log file instead of the host's."
    ),
]
SinceOption = Annotated[
    str, typer.Option(help="BOOT (the current boot) or a window such as 24h, 90m, 3d.")
]
SummaryOption = Annotated[
    bool, typer.Option("--summary", help="Print the compact JSON summary (<= 4000 bytes).")
]
SummaryFileOption = Annotated[
    Path | None,
    typer.Option(help="Also write the summary here, e.g. /dev/termination-log (not the host)."),
]
SmiOption = Annotated[
    bool, typer.Option("--nvidia-smi/--no-nvidia-smi", help="Query nvidia-smi if it is safe.")
]
NodeOption = Annotated[
    str | None, typer.Option(
        parser=inputs.node_name, help="The node's name (default: the host's /etc/hostname).")
]


def parse_since(text: str) -> timedelta | None:
    """None for BOOT (any case), else the window; typer.BadParameter (exit 2) otherwise."""
    if text.strip().upper() == BOOT:
        return None
    try:
        return bounds.duration(text)
    except errors.InputError as e:
        raise typer.BadParameter(f"{e} (or BOOT)", param_hint="--since") from e


def evidence(
    root: RootOption = Path("/"),
    kernel_log: KernelLogOption = None,
    since: SinceOption = BOOT,
    fmt: output.FormatOpt = output.Format.TABLE,
    as_json: output.JsonAlias = False,
    summary: SummaryOption = False,
    summary_file: SummaryFileOption = None,
    nvidia_smi: SmiOption = True,
    node: NodeOption = None,
) -> None:
    fmt = output.chosen(fmt, as_json)
    if fmt is not output.Format.TABLE and summary:
        raise typer.BadParameter("choose one of --json and --summary", param_hint="--summary")
    check_cli.require_dir(root, "--root")
    options = collect.CollectOptions(
        node=node,
        kernel_log=kernel.KernelLogOptions(path=kernel_log, since=parse_since(since)),
        nvidia_smi=smi.SmiOptions(enabled=nvidia_smi),
    )
    now = datetime.now(UTC).replace(microsecond=0)
    bundle = collect.collect(
        root, options, commands.SubprocessRunner(), xid_catalog.load_catalog(), now
    )
    compact = bundle.summary().to_json()
    if summary_file is not None:
        output.write_summary(summary_file, compact)
    if summary:
        typer.echo(compact)
    elif not output.emit(json.loads(bundle.to_json()), fmt):
        render(bundle, output.console)


# ---- the readable report ---------------------------------------------------------------------


def render(bundle: evidence_model.EvidenceBundle, console: rich.console.Console) -> None:
    source = bundle.kernel_log.source if bundle.kernel_log else "none"
    console.print(
        rich.text.Text(
            f"node {bundle.node}  boot {bundle.boot_id or '?'}  "
            f"collected {bundle.collected_at.isoformat()}  kernel log {source}"
        )
    )
    _render_verdict(bundle.verdict, console)
    _render_items(bundle.items, console)
    _render_gpus(bundle.gpus, console)
    counts = bundle.summary().xid_counts
    events = ", ".join(f"{code} x{n}" for code, n in counts.items()) or "none"
    console.print(rich.text.Text(f"kernel events: {events}"))


def _render_verdict(
    decision: evidence_model.VerdictDecision | None, console: rich.console.Console
) -> None:
    if decision is None:
        return
    console.print(
        rich.text.Text(f"verdict: {decision.verdict}  (rule {decision.rule})", style="bold")
    )
    for fact in decision.evidence:
        console.print(rich.text.Text(f"  because {fact.describe()} {dict(fact.labels)}"))
    if decision.driver_advice:
        console.print(rich.text.Text(f"  driver advice: {decision.driver_advice}"))
    for note in decision.notes:
        console.print(rich.text.Text(f"  note: {note}"))


def _render_items(
    items: tuple[evidence_model.EvidenceItem, ...], console: rich.console.Console
) -> None:
    table = rich.table.Table(show_lines=True)
    for column in ("item", "gpu", "status", "evidence"):
        table.add_column(column, overflow="fold")
    for item in items:
        table.add_row(
            item.item,
            item.gpu or "",
            rich.text.Text(item.status, style=check_cli.STATUS_STYLE[item.status]),
            rich.text.Text(item.evidence),
        )
    console.print(table)


def _link(gpu: evidence_model.GpuFacts) -> str:
    """``x16/x16 32.0/32.0 GT/s``; ``unknown`` for what sysfs did not say."""
    def shown(value: object, prefix: str = "") -> str:
        return "?" if value is None else f"{prefix}{value}"

    if all(v is None for v in (gpu.link_width, gpu.max_link_width, gpu.link_speed_gts,
                               gpu.max_link_speed_gts)):
        return "unknown"
    return (f"{shown(gpu.link_width, 'x')}/{shown(gpu.max_link_width, 'x')} "
            f"{shown(gpu.link_speed_gts)}/{shown(gpu.max_link_speed_gts)} GT/s")


def _render_gpus(gpus: tuple[evidence_model.GpuFacts, ...], console: rich.console.Console) -> None:
    table = rich.table.Table(title="GPUs", title_justify="left")
    for column in ("pci", "uuid", "in sysfs", "config all ff", "link", "root port"):
        table.add_column(column, overflow="fold")
    for gpu in gpus:
        link = _link(gpu)
        table.add_row(
            gpu.pci,
            gpu.uuid or "",
            "yes" if gpu.present else "NO",
            {True: "YES", False: "no", None: "unknown"}[gpu.config_all_ff],
            link,
            gpu.root_port or "",
        )
    console.print(table)


evidence.__doc__ = HELP
