"""What ``gpuguard xid parse`` does once its flags are read: scan the log, print the events.

Kept apart from the typer command (``cli.xid_parse``) because two entry points share it: the
command, and ``cli.entry``'s fast path, which runs ``xid parse`` without importing typer, rich
or the other command groups (issue 28: the command starts in the interpreter's own time). So
this module imports only the standard library and ``kernlog`` at start; JSON, the console's
width (``cli.console``, not ``cli.output``) and YAML are imported when there is something to
print with them.

Output: one JSON object per event (``json``), a YAML list (``yaml``) or a table (``table``),
then ``N events in M lines; K malformed Xid lines skipped`` — on stdout after a table, on
stderr after JSON or YAML so that stdout stays machine-readable.
"""

from __future__ import annotations

import os
import sys

from gpuguard.kernlog import parse, scan

TYPE_CHECKING = False  # typing's own flag, without importing typing (mypy reads either)
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from typing import Any, TextIO

    from gpuguard.model import xid

STDIN_NAME = "-"
TABLE, JSON, YAML = "table", "json", "yaml"  # the values of output.Format
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what shell tools exit with when the reader goes away
_MESSAGE_MIN_WIDTH = 20
_UUID_SHOWN = 12  # "GPU-8a47641b": enough to tell cards apart in a table
_HEADINGS = ("line", "when", "xid", "pci", "uuid", "pid", "process", "action", "message")
_GAP = "  "


def run(file: str, fmt: str, year: int | None) -> int:
    """Print the events of ``file`` (``-``: stdin) in ``fmt``; the exit status (0, or 141 when
    the reader of stdout went away). Raises InputError naming a file it cannot read."""
    parser = parse.XidLogParser(year=year)
    source = _stdin() if file == STDIN_NAME else file
    try:
        events = scan.scan_file(source, parser)
        if fmt == JSON:
            _write_json_lines(events, sys.stdout)
            _print_summary(parser.stats, sys.stderr)
        elif fmt == YAML:
            from gpuguard.cli import output

            output.emit([event_record(e) for e in events], output.Format.YAML)
            _print_summary(parser.stats, sys.stderr)
        else:
            _print_table(list(events), parser.stats)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return 0


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


def summary(stats: parse.ParseStats) -> str:
    """``4 events in 11 lines; 1 malformed Xid lines skipped (first at line 5)``."""
    events = f"{stats.events} event{'' if stats.events == 1 else 's'}"
    line = f"{events} in {stats.lines_read} lines; {stats.malformed} malformed Xid lines skipped"
    if stats.first_malformed:
        line += " (first at line " + ", ".join(map(str, stats.first_malformed)) + ")"
    return line


def _write_json_lines(events: Iterable[xid.KernelEvent], out: TextIO) -> None:
    encode = None
    for event in events:
        if encode is None:
            import json  # at the first event: a log without one needs no JSON

            encode = json.dumps
        out.write(encode(event_record(event)) + "\n")
    out.flush()


def _print_table(events: list[xid.KernelEvent], stats: parse.ParseStats) -> None:
    if events:
        from gpuguard.cli import console  # rich only: cli.output would import typer and YAML

        sys.stdout.write(events_table(events, console.make_console().width))
    _print_summary(stats, sys.stdout)


def events_table(events: list[xid.KernelEvent], width: int) -> str:
    """Aligned columns, as ``kubectl get`` prints them, that fit ``width``: the message gets
    what the others leave, cut with ….

    Written by hand, not as a rich table: rich lays a table out at about a millisecond a row,
    and a busy node's journal has thousands of Xid lines (8,500 took 7.6 s; these take 0.1 s).
    Every cell passes ``safe_text.visible``, the rule the console applies to what it prints.
    """
    from gpuguard.cli import safe_text

    rows = [_HEADINGS, *([safe_text.visible(c) for c in _table_cells(e)] for e in events)]
    widths = [max(map(len, column)) for column in zip(*rows, strict=True)][:-1]
    message_width = max(width - sum(widths) - len(_GAP) * len(widths), _MESSAGE_MIN_WIDTH)
    return "".join(
        _GAP.join([*map(str.ljust, row, widths), _cut(row[-1], message_width)]) + "\n"
        for row in rows
    )


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


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


def _print_summary(stats: parse.ParseStats, out: TextIO) -> None:
    """The summary as one plain line: digits and words, nothing to escape or lay out."""
    out.write(summary(stats) + "\n")
    out.flush()


def _stdin() -> scan.BinaryReader:
    # typeshed calls stdin's buffer a BinaryIO; at run time it is a BufferedReader (readinto).
    return sys.stdin.buffer  # type: ignore[return-value]


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
