"""``gpuguard gpu-isolate apply|undo``: what the pinned GPU-isolation Job runs on a node
(docs/gpu-isolation.md).

Applies (or removes) compute mode PROHIBITED and the host's exclusion list for the given
GPU UUIDs, reads both back, and prints the report (one JSON line); ``--summary-file`` writes
it where Kubernetes reads the Job's result (``/dev/termination-log``). Exit 0 when every GPU
ended in the wanted state, 1 otherwise, 2 on a bad flag.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated

import typer

from gpuguard.agent import commands
from gpuguard.agent import gpu_isolation as host
from gpuguard.cli import output

HELP = """Take GPUs out on this host (apply) or put them back (undo).

\b
  apply   nvidia-smi -i UUID -c PROHIBITED, and UUID added to
          /etc/gpuguard/excluded-gpus (read by the per-node device plugin)
  undo    nvidia-smi -i UUID -c DEFAULT, and UUID removed from that list

Run by gpuguard's GPU-isolation Job with the host's /etc/gpuguard mounted at
/host/etc/gpuguard (--root /host). Never run by hand on a node gpuguard manages: undo a GPU
isolation with the gpuguard.io/gpu-return annotation (docs/gpu-isolation.md).

\b
Example:
  gpuguard gpu-isolate apply --root /host --uuid GPU-0a8e... --summary-file /dev/termination-log
"""

UuidOption = Annotated[list[str], typer.Option("--uuid", help="A GPU UUID (repeatable).")]
RootOption = Annotated[
    Path, typer.Option(exists=True, file_okay=False, help="The host's root (/host in the Job).")
]
SummaryFileOption = Annotated[
    Path | None, typer.Option(help="Also write the report here (/dev/termination-log).")
]

app = typer.Typer(help=HELP, no_args_is_help=True)


def _run(
    step: Callable[[host.GpuControl, Sequence[str], Path], host.Report],
    uuids: list[str],
    root: Path,
    summary_file: Path | None,
) -> None:
    bad = [u for u in uuids if not u.startswith("GPU-")]
    if bad or not uuids:
        raise typer.BadParameter(f"expected GPU-<uuid>, got {bad or 'none'}", param_hint="--uuid")
    report = step(host.NvidiaSmi(commands.SubprocessRunner(), root), uuids, root)
    text = report.to_json()
    if summary_file is not None:
        output.write_summary(summary_file, text)
    typer.echo(text)
    raise typer.Exit(0 if report.ok else 1)


@app.command("apply", help="Compute mode PROHIBITED and the exclusion list, read back.")
def apply(
    uuid: UuidOption, root: RootOption = Path("/"), summary_file: SummaryFileOption = None
) -> None:
    _run(host.apply, uuid, root, summary_file)


@app.command("undo", help="Compute mode DEFAULT and the GPUs off the exclusion list.")
def undo(
    uuid: UuidOption, root: RootOption = Path("/"), summary_file: SummaryFileOption = None
) -> None:
    _run(host.undo, uuid, root, summary_file)
