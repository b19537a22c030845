"""Rendering of data for the terminal: ``-o table`` (rich), ``json`` or ``yaml``.

Commands build plain dicts/lists; this module prints them. One way to print data.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


console = Console(soft_wrap=False)
errors = Console(stderr=True)


def emit(data: Any, fmt: Format) -> bool:
    """Print ``data`` as JSON/YAML; returns False for table (the caller draws its table)."""
    if fmt is Format.JSON:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        return True
    if fmt is Format.YAML:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
        return True
    return False


def write_summary(path: Path, text: str, flag: str = "--summary-file") -> None:
    """Write a Job's compact result where Kubernetes reads it (``/dev/termination-log``)."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise typer.BadParameter(f"cannot write {path}: {e.strerror}", param_hint=flag) from e


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    grid = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*row)
    console.print(grid)
