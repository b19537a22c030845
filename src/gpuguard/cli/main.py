"""The ``gpuguard`` command line: assembles the command groups.

The executable starts in ``cli.entry``, which answers ``--version`` and the plain forms of
``xid parse`` itself and imports this module for everything else.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from gpuguard.cli import (
    agent,
    audit,
    backtest,
    breaker,
    burnin,
    change,
    check,
    deadline,
    demo,
    entry,
    evidence,
    failures,
    gate,
    gpu_isolate,
    guard,
    health,
    hygiene,
    inputs,
    ledger,
    manifest,
    phantom,
    run,
    settings_ref,
    sim,
    sim_serve,
    utilization,
    xid,
)

app = typer.Typer(
    name="gpuguard",
    help=(
        "Keep Kubernetes GPU clusters healthy: detect GPU faults (Xid, ECC, GPUs off the bus), "
        "isolate nodes safely, diagnose, validate and return them, and gate new nodes.\n\n"
        "Start with `gpuguard demo` (runs on the built-in simulator, no cluster needed)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=failures.GuardedGroup,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(entry.version_line())
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    deadline_: Annotated[timedelta, typer.Option(
        "--deadline", envvar=deadline.ENV, parser=inputs.duration(longest=deadline.LONGEST),
        metavar=inputs.DURATION, show_default="15s",
        help="The most a command that reads the cluster (status, gate, ledger ...) may take: "
        "past it, one line naming what it waited on, exit 1.",
    )] = deadline.DEFAULT,
    debug: Annotated[bool, typer.Option(
        "--debug", help="Show the traceback when a command fails (for bug reports).",
    )] = False,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print gpuguard's version and exit.",
    )] = False,
) -> None:
    """Keep Kubernetes GPU clusters healthy: detect GPU faults (Xid, ECC, GPUs off the bus),
    isolate nodes safely, diagnose, validate and return them, and gate new nodes.

    Start with `gpuguard demo` (runs on the built-in simulator, no cluster needed).
    Exit status: 0 done, 1 a dependency failed (API server, Prometheus), 2 bad input.
    """
    if ctx.invoked_subcommand in deadline.COMMANDS:
        deadline.arm(ctx.invoked_subcommand, deadline_)
        ctx.call_on_close(deadline.disarm)
app.add_typer(xid.app, name="xid")
sim.app.command("serve")(sim_serve.serve)
app.add_typer(sim.app, name="sim")
app.add_typer(ledger.app, name="ledger")
app.add_typer(breaker.app, name="breaker")
app.add_typer(manifest.app, name="manifest")
app.add_typer(gpu_isolate.app, name="gpu-isolate")
app.add_typer(change.app, name="change")
app.command("check")(check.check)
app.command("evidence", short_help="Evidence on an isolated node and its repair verdict.")(
    evidence.evidence
)
app.command("burnin", short_help="Burn in the GPUs before return to pool; exit 0 = passed.")(
    burnin.burnin
)
app.command("demo", short_help="The guard against real incidents, in the simulator.")(demo.demo)
app.command("run", short_help="The controller: Lease, a tick per interval, /metrics.")(run.run)
app.command("once", short_help="One tick: decide and act (or --dry-run), with reasons.")(guard.once)
app.command("status", short_help="Nodes by lifecycle state, breaker, leader.")(guard.status)
app.command("explain", short_help="Why a node is where it is, with evidence.")(guard.explain)
app.command("backtest", short_help="Replay the policy over Prometheus history.")(backtest.backtest)

app.command("phantom", short_help="GPUs busy with nothing: wasted watts, evidence, advice.")(
    phantom.phantom
)
app.command("utilization", short_help="What busy GPUs really do: tensor, DRAM, occupancy.")(
    utilization.utilization
)

app.command("agent", short_help="The node agent: kernel-log Xid counters, conformance checks.")(
    agent.agent
)
app.command("gate", short_help="Onboarding gate: remove the registration taint if all pass.")(
    gate.gate
)

app.command("audit", short_help="Read-only review of the cluster's GPU gaps; HTML report.")(
    audit.audit
)
app.command("health", short_help="Is NODE fit to run training? yes/no with the reasons.")(
    health.health
)
app.command("hygiene", short_help="Workloads that can leave GPUs busy with nothing.")(
    hygiene.hygiene
)
app.command("settings", short_help="Every setting: type, default, what it does.")(
    settings_ref.settings
)

if __name__ == "__main__":  # pragma: no cover
    app()
