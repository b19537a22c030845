"""Rendering of data for the terminal: ``-o table`` (rich), ``json`` or ``yaml``.

Commands build plain dicts/lists; this module prints them. One way to print data, and one
rule for it: data is text, and shown safely (``safe_text``: control characters escaped,
long lines cut — whatever a node name, annotation or log line holds). The consoles here
never read markup or emoji codes in what they print (a process named ``[/evil]`` is
printed, not parsed; a PCI address ``0000:ab:00.0`` is not the emoji ``:ab:``); styling is
given explicitly (``style=``, ``rich.text.Text``). On a terminal tables fit its width;
piped, they are not wrapped at 80 columns.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from gpuguard.cli import safe_text
from gpuguard.cli.console import make_console

T = TypeVar("T")
ERROR_LIMIT = 1000  # characters of an error line: enough for every input it names


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


FormatOpt = Annotated[Format, typer.Option("--output", "-o", help="table, json or yaml.")]
JsonAlias = Annotated[bool, typer.Option("--json", hidden=True, help="Same as -o json.")]


console = make_console()
errors = make_console(stderr=True)


def reset() -> None:
    """Re-create the consoles for the current stdout/stderr (called as each command starts)."""
    global console, errors  # noqa: PLW0603 - the module's consoles follow the process's streams
    console = make_console()
    errors = make_console(stderr=True)


def progress(
    items: Iterable[T], what: Callable[[T], str], total: int | None = None
) -> Iterator[T]:
    """``items`` one by one, with a progress bar on stderr when it is a terminal (transient,
    so it leaves nothing behind); silent when piped. ``total``: how many, if not ``len``."""
    if not errors.is_terminal:
        yield from items
        return
    count = total if total is not None else len(items) if isinstance(items, Sequence) else None
    with Progress(*Progress.get_default_columns(), console=errors, transient=True) as bar:
        task = bar.add_task("", total=count)
        for item in items:
            bar.update(task, description=what(item))
            yield item
            bar.advance(task)


def chosen(fmt: Format, as_json: bool) -> Format:
    """``-o`` as given, or json for the ``--json`` alias."""
    return Format.JSON if as_json else fmt


def bold(text: str) -> Text:
    return Text(text, style="bold")


def error_line(message: str) -> None:
    """``error: <message>`` as one plain line on stderr (the form every failure takes)."""
    text = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    sys.stderr.write(f"error: {safe_text.shown(text, ERROR_LIMIT)}\n")


def line(text: str) -> None:
    """One line of plain text on stdout (a summary, a generated file), shown safely."""
    sys.stdout.write(safe_text.visible(text) + "\n")


def emit(data: Any, fmt: Format) -> bool:
    """Print ``data`` as JSON/YAML; returns False for table (the caller draws its table)."""
    if fmt is Format.JSON:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        return True
    if fmt is Format.YAML:
        sys.stdout.write(
            yaml.safe_dump(_plain(data), sort_keys=False, default_flow_style=False,
                           allow_unicode=True)
        )
        return True
    return False


def _plain(data: Any) -> Any:
    """Data YAML can dump safely: what JSON would print (times and enums as strings)."""
    return json.loads(json.dumps(data, default=str))


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
