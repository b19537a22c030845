"""Placeholder for `demo` (being built)."""

from __future__ import annotations

import typer


def demo() -> None:
    """Not built yet."""
    raise typer.Exit(3)
