"""Placeholder for `xid_explain` (being built)."""

from __future__ import annotations

import typer


def explain() -> None:
    """Not built yet."""
    raise typer.Exit(3)
