"""``gpuguard xid parse``: list the Xid and fallen-off-the-bus events in a kernel log.

The imperative shell around ``kernlog.scan``: opens the file or stdin, prints one JSON object per
event (``--json``) or a table, and says how many lines it could not read. Exit 2 names a file
it could not read.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, TextIO, cast

import typer
from rich import table
from rich.console import Console

from gpuguard.cli import output
from gpuguard.kernlog import parse as kernlog_parse
from gpuguard.kernlog import scan
from gpuguard.model import xid

STDIN_NAME = "-"
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what shell tools exit with when the reader goes away
_MESSAGE_MIN_WIDTH = 20
_UUID_SHOWN = 12  # "GPU-8a47641b": enough to tell cards apart in a table


def parse(
    file: Annotated[
        str,
        typer.Argument(
            help="Kernel log to read: a dmesg, journalctl or syslog file; '-' reads stdin.",
            show_default="stdin",
        ),
    ] = STDIN_NAME,
    fmt: Annotated[output.Format, typer.Option(
        "--output", "-o", help="table; json: one JSON object per event (JSON lines); yaml.",
    )] = output.Format.TABLE,
    as_json: output.JsonAlias = False,
    year: Annotated[
        int | None,
        typer.Option(
            help="Year of syslog/journald stamps ('Nov 29 11:28:11 host kernel:'), which have "
            "none; without it those events get no timestamp."
        ),
    ] = None,
) -> None:
    """List the GPU events in a kernel log: Xid lines and 'fallen off the bus'.

    Reads every shape the driver's lines come in: dmesg, dmesg -T,
    dmesg --time-format iso, journalctl/syslog, Talos console, bare lines.
    Attaches each GPU's UUID from the driver's 'GPU at PCI:...' line, reads
    Xid 154's recovery action and Xid 94/95's RST/D-RST flags, and skips
    lines it cannot read, counting them.

    Examples:

      journalctl -k -b -o short-iso | gpuguard xid parse

      dmesg -T | gpuguard xid parse --json | jq 'select(.xid == 79)'

      gpuguard xid parse --year 2025 /var/log/kern.log

    journalctl's default stamps have no year: use -o short-iso or --year
    to get timestamps. Exit status: 0 when the log was read (with or
    without events), 2 when the file cannot be read.
    """
    parser = kernlog_parse.XidLogParser(year=year)
    source = _stdin() if file == STDIN_NAME else file
    try:
        events = scan.scan_file(source, parser)
        chosen = output.chosen(fmt, as_json)
        if chosen is output.Format.JSON:
            _write_json_lines(events, sys.stdout)
            _print_summary(parser.stats, output.errors)
        elif chosen is output.Format.YAML:
            output.emit([event_record(e) for e in events], chosen)
            _print_summary(parser.stats, output.errors)
        else:
            _print_table(list(events), parser.stats, output.console)
    except BrokenPipeError as e:
        _silence_stdout()
        raise typer.Exit(EXIT_BROKEN_PIPE) from e


def event_record(event: xid.KernelEvent) -> dict[str, Any]:
    """The JSON form of one event: every field, enums as their values, times as ISO 8601."""
    return {
        "line_no": event.line_no,
        "kind": event.kind.value,
        "xid": event.xid,
        "pci": event.pci,
        "address": event.address,
        "uuid": event.uuid,
        "pid": event.pid,
        "process": event.process,
        "recovery_action": event.recovery_action.value if event.recovery_action else None,
        "reset_flags": list(event.reset_flags),
        "timestamp": event.timestamp.isoformat() if event.timestamp else None,
        "uptime_s": event.uptime_s,
        "message": event.message,
    }


def _write_json_lines(events: Iterable[xid.KernelEvent], out: TextIO) -> None:
    for event in events:
        out.write(json.dumps(event_record(event)) + "\n")
    out.flush()


def _print_table(
    events: list[xid.KernelEvent], stats: kernlog_parse.ParseStats, console: Console
) -> None:
    if events:
        console.print(_events_table(events, console.width))
    _print_summary(stats, console)


def _events_table(events: list[xid.KernelEvent], width: int) -> table.Table:
    """A table that fits ``width``: the message column gets what the others leave, cut with …."""
    rows = [list(_table_cells(event)) for event in events]
    headings = ("line", "when", "xid", "pci", "uuid", "pid", "process", "action", "message")
    grid = table.Table()
    fixed_widths = [
        max(len(cell) for cell in column) for column in zip(headings, *rows, strict=False)
    ]
    for heading in headings[:-1]:
        grid.add_column(heading, no_wrap=True)
    borders_and_padding = 3 * len(headings) + 1
    message_width = width - sum(fixed_widths[:-1]) - borders_and_padding
    grid.add_column(
        headings[-1],
        no_wrap=True,
        overflow="ellipsis",
        width=max(message_width, _MESSAGE_MIN_WIDTH),
    )
    for row in rows:
        grid.add_row(*row)
    return grid


def _table_cells(event: xid.KernelEvent) -> Iterator[str]:
    yield str(event.line_no)
    yield _when(event)
    yield str(event.xid) if event.xid is not None else "off bus"
    yield event.pci or "?"
    yield event.uuid[:_UUID_SHOWN] + "…" if event.uuid else ""
    yield str(event.pid) if event.pid is not None else ""
    yield event.process or ""
    yield _action(event)
    yield event.message


def _when(event: xid.KernelEvent) -> str:
    if event.timestamp is not None:
        return event.timestamp.isoformat(sep=" ", timespec="seconds")
    return f"+{event.uptime_s:.3f}s" if event.uptime_s is not None else ""


def _action(event: xid.KernelEvent) -> str:
    if event.recovery_action is not None:
        return event.recovery_action.value
    return ",".join(event.reset_flags)


def _print_summary(stats: kernlog_parse.ParseStats, console: Console) -> None:
    events = f"{stats.events} event{'' if stats.events == 1 else 's'}"
    line = f"{events} in {stats.lines_read} lines; {stats.malformed} malformed Xid lines skipped"
    if stats.first_malformed:
        line += " (first at line " + ", ".join(map(str, stats.first_malformed)) + ")"
    console.print(line, highlight=False)


def _stdin() -> scan.BinaryReader:
    # typeshed calls stdin's buffer a BinaryIO; at run time it is a BufferedReader (readinto).
    return cast(scan.BinaryReader, sys.stdin.buffer)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
