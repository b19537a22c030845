"""Entry point: assembles the ``gpuguard`` command groups."""

from __future__ import annotations

import typer

from gpuguard.cli import backtest, check, demo, guard, run, sim, xid

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
)
app.add_typer(xid.app, name="xid")
app.add_typer(sim.app, name="sim")
app.command("check")(check.check)
app.command("demo")(demo.demo)
app.command("run")(run.run)
app.command("once")(guard.once)
app.command("status")(guard.status)
app.command("explain")(guard.explain)
app.command("backtest")(backtest.backtest)

if __name__ == "__main__":  # pragma: no cover
    app()
