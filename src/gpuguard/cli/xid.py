"""``gpuguard xid``: parse kernel logs for Xid events, explain an Xid code."""

from __future__ import annotations

import typer

from gpuguard.cli import xid_explain, xid_parse

app = typer.Typer(help="Xid tools: parse kernel logs, explain a code.", no_args_is_help=True)
app.command("parse")(xid_parse.parse)
app.command("explain")(xid_explain.explain)
