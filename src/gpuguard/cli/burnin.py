"""``gpuguard burnin``: the burn-in a validation Job runs on an isolated node
(docs/design.md#return-to-pool).

Parses the flags into a ``BurninRequest``, runs ``gpuguard.agent.burnin.running.run`` with the
real backend, command runner and packaged throughput table, prints a table, JSON or the
compact termination message, and exits 0 (passed), 1 (not passed) or 2 (bad flag/environment).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from gpuguard import errors
from gpuguard.agent.burnin import hardware, report, running
from gpuguard.catalog import gpu_models
from gpuguard.cli import inputs, output
from gpuguard.policy import burnin as burnin_policy

EXIT_PASSED, EXIT_FAILED, EXIT_ENVIRONMENT = 0, 1, 2


HELP = f"""Burn in this node's GPUs before it returns to the pool; exit 0 only if it passed.

Matmul mode (docs/design.md#return-to-pool): a square matmul on every visible GPU at once for
--duration, warm-up excluded. It passes only when all four checks PASS: gpu-count (found =
--expected-gpus), gpu-errors (no CUDA error on any GPU; a failing GPU fails with its text, the
others are still measured), throughput-balance (slowest/fastest >=
{burnin_policy.SEED_MIN_MAX_RATIO}) and throughput-floor (each GPU >= --floor of its model's dense
{"/".join(gpu_models.Dtype)} throughput from the packaged datasheet table, so a uniformly slow node
fails; a model the table does not know makes it UNKNOWN, never PASS). A real 8192² matmul reaches
well below datasheet peak on many cards: tune --floor per fleet.

Memory mode, for memory-class Xids ({", ".join(map(str, sorted(burnin_policy.MEMORY_FAULT_XIDS)))};
chosen by --mode auto from --reason xid-NN): `dcgmi diag -r 4` when dcgmi is on PATH. It
includes memtest and takes TENS OF MINUTES (up to ~45 min on a 4-GPU Hopper server; bounded
by --dcgm-timeout). Without DCGM: a CUDA write/read pattern test over most of free memory.
Neither possible: UNKNOWN, not passed.

Needs PyTorch with CUDA (pip install torch) for --device cuda. --device cpu is for tests only:
a tiny pure-Python matmul whose output says "CPU mode: not a burn-in result"; it never passes.

\b
Exit codes: 0 passed, 1 not passed (FAIL or UNKNOWN), 2 bad flag or environment
(e.g. --device cuda without PyTorch/CUDA).

\b
Examples:
  gpuguard burnin --expected-gpus 8
  gpuguard burnin --duration 90s --size 8192 --dtype bf16 --floor 0.6 --json
  gpuguard burnin --mode auto --reason xid-48 --expected-gpus 8
  GPUGUARD_EXPECTED_GPUS=8 gpuguard burnin --summary-file /dev/termination-log
  gpuguard burnin --device cpu --size 32 --duration 1s     # tests only
"""


DurationOption = Annotated[
    timedelta, typer.Option(
        parser=inputs.duration(), metavar=inputs.DURATION, show_default="90s",
        help="How long each GPU runs its timed matmul (90s, 2m, ...).",
    ),
]
SizeOption = Annotated[int, typer.Option(min=1, help="Side of the square matrices.")]
DtypeOption = Annotated[gpu_models.Dtype, typer.Option(help="Matmul precision.")]
ExpectedOption = Annotated[
    int | None,
    typer.Option(
        min=0,
        envvar="GPUGUARD_EXPECTED_GPUS",
        help="GPUs the node must show (the Job passes the gpuguard.io/gpu-capacity annotation).",
    ),
]
FloorOption = Annotated[
    float,
    typer.Option(min=0.0, max=1.0, help="Least fraction of the model's expected TFLOPS per GPU."),
]
DeviceOption = Annotated[
    hardware.DeviceKind, typer.Option(help="cuda (PyTorch) or cpu (tests only).")
]
ModeOption = Annotated[
    burnin_policy.Mode, typer.Option(help="auto: memory for memory-class --reason, else matmul.")
]
ReasonOption = Annotated[
    str | None, typer.Option(help="Why the node was isolated, e.g. xid-48 (for --mode auto).")
]
DcgmTimeoutOption = Annotated[
    timedelta, typer.Option(
        parser=inputs.duration(), metavar=inputs.DURATION, show_default="60m",
        help="Hard limit for dcgmi diag -r 4 before it counts as UNKNOWN.",
    ),
]
UuidOption = Annotated[
    str | None,
    typer.Option(help="Burn in only this GPU (GPU-...): an isolated GPU before it returns."),
]
SummaryOption = Annotated[
    bool,
    typer.Option("--summary", help="Compact JSON <= 4000 bytes for the termination message."),
]


def burnin(
    duration: DurationOption = timedelta(seconds=90),
    size: SizeOption = 8192,
    dtype: DtypeOption = gpu_models.Dtype.FP16,
    expected_gpus: ExpectedOption = None,
    floor: FloorOption = burnin_policy.DEFAULT_FLOOR,
    device: DeviceOption = hardware.DeviceKind.CUDA,
    mode: ModeOption = burnin_policy.Mode.AUTO,
    reason: ReasonOption = None,
    dcgm_timeout: DcgmTimeoutOption = timedelta(minutes=60),
    uuid: UuidOption = None,
    fmt: output.FormatOpt = output.Format.TABLE,
    json_output: output.JsonAlias = False,
    summary: SummaryOption = False,
    summary_file: Annotated[
        Path | None,
        typer.Option(help="Also write the compact summary here, e.g. /dev/termination-log."),
    ] = None,
) -> None:
    fmt = output.chosen(fmt, json_output)
    if fmt is not output.Format.TABLE and summary:
        raise typer.BadParameter("choose one of --json and --summary", param_hint="--summary")
    request = running.BurninRequest(
        device=device,
        mode=mode,
        xid=_reason(reason),
        duration_s=duration.total_seconds(),
        size=size,
        dtype=dtype,
        expected_gpus=expected_gpus,
        floor=floor,
        dcgm_timeout_s=dcgm_timeout.total_seconds(),
        uuid=uuid,
    )
    try:
        result = running.run(request, running.Environment())
    except hardware.BackendUnavailable as e:
        output.error_line(str(e))
        raise typer.Exit(EXIT_ENVIRONMENT) from e
    if summary_file is not None:
        output.write_summary(summary_file, result.summary())
    _render(result, fmt, summary=summary)
    raise typer.Exit(EXIT_PASSED if result.passed else EXIT_FAILED)


def _reason(text: str | None) -> int | None:
    try:
        return burnin_policy.parse_reason(text)
    except errors.InputError as e:
        raise typer.BadParameter(str(e), param_hint="--reason") from e


def _render(result: report.BurninReport, fmt: output.Format, *, summary: bool) -> None:
    if result.device == hardware.DeviceKind.CPU:
        output.errors.print(report.CPU_NOTE, style="bold red")
    if summary:
        typer.echo(result.summary())
    elif not output.emit(result.as_dict(), fmt):
        _tables(result)


def _tables(result: report.BurninReport) -> None:
    if result.gpus:
        pairs = zip(result.gpus, result.fractions, strict=True)
        rows = [_gpu_row(gpu, fraction) for gpu, fraction in pairs]
        columns = ("gpu", "name", "tflops", "of expected", "error")
        output.table(f"burn-in: {result.mode} on {result.device}", columns, rows)
    checks = [(c.check, c.status.value, c.evidence) for c in result.verdict.checks]
    output.table("checks", ("check", "status", "evidence"), checks)
    verdict = Text("PASSED", "green") if result.passed else Text("NOT PASSED", "bold red")
    output.console.print(verdict, result.note, soft_wrap=True)


def _gpu_row(gpu: burnin_policy.GpuResult, fraction: float | None) -> tuple[str, ...]:
    tflops = "-" if gpu.tflops is None else f"{gpu.tflops:.1f}"
    share = "unknown" if fraction is None else f"{fraction:.0%}"
    return (str(gpu.index), gpu.name, tflops, share, gpu.error or "")


burnin.__doc__ = HELP
