"""Placeholder for `xid_parse` (being built)."""

from __future__ import annotations

import typer


def parse() -> None:
    """Not built yet."""
    raise typer.Exit(3)
