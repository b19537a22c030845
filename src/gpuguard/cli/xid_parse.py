"""``gpuguard xid parse``: list the Xid and fallen-off-the-bus events in a kernel log.

The command's flags; what it does with them is ``cli.xid_events`` (opens the file or stdin,
prints one JSON object per event or a table, says how many lines it could not read), which
``cli.entry`` also runs without typer for the plain forms of this command. Exit 2 names a file
it could not read.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gpuguard.cli import output, xid_events


def parse(
    file: Annotated[
        str,
        typer.Argument(
            help="Kernel log to read: a dmesg, journalctl or syslog file; '-' reads stdin.",
            show_default="stdin",
        ),
    ] = xid_events.STDIN_NAME,
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
    code = xid_events.run(file, output.chosen(fmt, as_json), year)
    if code:
        raise typer.Exit(code)
