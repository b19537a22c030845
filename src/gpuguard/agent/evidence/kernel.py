"""Xid events from the host's kernel log, for the current boot or a recent window.

Sources, first that answers: a file given with ``--kernel-log``; else the host's journal files,
read by the image's own journalctl (``journalctl --root /host -k -o short-iso --no-pager -b`` or
``--since <time>``, under a hard timeout; see ``hostcmd``);
else ``/var/log/kern.log`` (``/var/log/messages`` on RHEL); else the kernel's ring buffer
(``dmesg --time-format iso``: this boot only, as far back as the buffer reaches). Every line
goes through the shared parser (``kernlog``), so Xid 154's recovery action and the driver's
"fallen off the bus" message (no Xid number) are read exactly as the agent reads them.

A log flooded with one code (an Xid 13 storm) is counted in full but only the latest
``KEEP_PER_KIND`` events of each (code, GPU) are kept, so memory stays bounded and no code,
GPU or latest Xid 154 advice is ever lost to the cap.

"The current boot" in a file is everything after its last ``Linux version`` banner (the
kernel's first line of a boot); a file without one is taken whole, and the evidence says so.
A window (``--since 24h``) keeps events stamped at or after ``now - window``; lines whose time
cannot be read are kept (evidence is never silently dropped). Syslog stamps carry no year: they
are read in ``now``'s year.
"""

from __future__ import annotations

import stat
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO

from gpuguard.agent.checks import hostfs
from gpuguard.agent.evidence import hostcmd
from gpuguard.catalog import xid as xid_catalog
from gpuguard.errors import InputError
from gpuguard.kernlog import parse, scan
from gpuguard.model import decisions, evidence, ports, xid

Status = decisions.CheckStatus
JOURNAL_TIMEOUT_S = 30.0
KERNEL_LOG_FILES = ("var/log/kern.log", "var/log/messages")  # Debian/Ubuntu, RHEL/SUSE
BOOT_BANNER = b"Linux version "
CURRENT_BOOT = "current boot"
DMESG_ARGV = ("dmesg", "--time-format", "iso")
KEEP_PER_KIND = 50
"""Events kept per (kind, code, GPU): a log flooded with one code stays small in memory (the
evidence Job runs under a 256 MiB limit); every event is still counted."""
_NO_ENTRIES = "-- No entries --"


@dataclass(frozen=True, slots=True)
class KernelLogOptions:
    """``path``: a log file to read instead of the host's; ``since``: None = current boot."""

    path: Path | None = None
    since: timedelta | None = None
    timeout_s: float = JOURNAL_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class KernelRead:
    events: tuple[xid.KernelEvent, ...]
    log: evidence.KernelLogRead | None
    item: evidence.EvidenceItem


def read_events(
    root: Path, options: KernelLogOptions, runner: ports.CommandRunner, now: datetime
) -> KernelRead:
    """The Xid events of the window, from the first source that answers (see module doc)."""
    tried: list[str] = []
    if options.path is not None:
        given = _from_file(options.path, str(options.path), options, now, tried)
        return given or _unknown(tried)
    return (
        _from_command(root, runner, _journal_argv(options.since, now), options, now, tried)
        or _from_host_file(root, options, now, tried)
        or _from_command(root, runner, DMESG_ARGV, options, now, tried)
        or _unknown(tried)
    )


def since_text(since: timedelta | None, now: datetime) -> str:
    if since is None:
        return CURRENT_BOOT
    return f"since {(now - since).isoformat()}"


def xid_item(read: KernelRead, catalog: xid_catalog.XidCatalog) -> evidence.EvidenceItem:
    """FAIL when the window holds a hardware-class Xid or a fall-off message."""
    if read.log is None:
        return evidence.EvidenceItem("hardware-xid", Status.UNKNOWN, "no kernel log was read")
    counts = read.log.event_counts
    faults = {key: n for key, n in counts.items() if _is_hardware(key, read.events, catalog)}
    if not faults:
        others = ", ".join(f"Xid {key} x{n}" for key, n in counts.items()) or "none"
        text = f"no hardware-class Xid in {read.log.since}; other codes: {others}"
        return evidence.EvidenceItem("hardware-xid", Status.PASS, text)
    counted = ", ".join(f"{_key_name(key)} x{n}" for key, n in faults.items())
    return evidence.EvidenceItem("hardware-xid", Status.FAIL, f"{read.log.since}: {counted}")


def _is_hardware(
    key: str, events: tuple[xid.KernelEvent, ...], catalog: xid_catalog.XidCatalog
) -> bool:
    """A code judged per event (NVLink5, 74, 94/95, 154: ``catalog.events``) is a fault when
    one of its kept events is; any other code by its class."""
    if key == evidence.FALLEN_OFF_BUS_KEY:
        return True
    code = int(key)
    if not catalog.has_event_rules(code):
        return catalog.is_hardware(code)
    return any(catalog.judges_hardware(e) for e in events if e.xid == code)


def _key_name(key: str) -> str:
    return "fallen off the bus" if key == evidence.FALLEN_OFF_BUS_KEY else f"Xid {key}"


# ---- host commands (journalctl, dmesg) -----------------------------------------------------


def _from_command(
    root: Path,
    runner: ports.CommandRunner,
    argv: Sequence[str],
    options: KernelLogOptions,
    now: datetime,
    tried: list[str],
) -> KernelRead | None:
    """Run journalctl or dmesg; None (and why, in ``tried``) when it gives nothing."""
    lines = _command_lines(root, runner, argv, options.timeout_s, tried)
    if lines is None:
        return None
    shown = lines.pop(0)
    parser = parse.XidLogParser(year=now.year)
    # journalctl applied the window itself; the ring buffer holds this boot only
    cutoff = _cutoff(options.since, now) if argv[0] == DMESG_ARGV[0] else None
    window = _Window(first_line=0, cutoff=cutoff)
    events = parse.parse_lines(lines, parser)
    return _finish(events, window, shown, since_text(options.since, now), parser, tried)


def _command_lines(
    root: Path,
    runner: ports.CommandRunner,
    argv: Sequence[str],
    timeout_s: float,
    tried: list[str],
) -> list[str] | None:
    """[the command as shown, *its output lines], or None with the reason added to ``tried``."""
    command = [argv[0], *hostcmd.root_args(argv[0], root), *argv[1:]]
    shown = " ".join(command)
    result = runner.run(command, timeout_s=timeout_s)
    if result.returncode == hostcmd.NOT_FOUND:
        tried.append(f"{argv[0]}: not in the container")
        return None
    if result.timed_out:
        tried.append(f"{shown}: timed out after {timeout_s:g}s")
        return None
    if result.returncode != 0:
        tried.append(f"{shown}: exit {result.returncode}: {result.stderr.strip()[:200]}")
        return None
    lines = result.stdout.splitlines()
    if not [line for line in lines if line.strip() and line.strip() != _NO_ENTRIES]:
        tried.append(f"{shown}: no kernel lines")
        return None
    return [shown, *lines]


def _journal_argv(since: timedelta | None, now: datetime) -> list[str]:
    window = ["-b"]
    if since is not None:
        window = ["--since", (now - since).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")]
    return ["journalctl", "-k", "-o", "short-iso", "--no-pager", *window]


# ---- a file ------------------------------------------------------------------------------------


def _from_host_file(
    root: Path, options: KernelLogOptions, now: datetime, tried: list[str]
) -> KernelRead | None:
    for rel in KERNEL_LOG_FILES:
        try:
            path = hostfs.resolve(root, rel)
        except hostfs.HostReadError as e:
            tried.append(str(e))
            continue
        if (read := _from_file(path, hostfs.shown(rel), options, now, tried)) is not None:
            return read
    return None


def _from_file(
    path: Path, shown: str, options: KernelLogOptions, now: datetime, tried: list[str]
) -> KernelRead | None:
    parser = parse.XidLogParser(year=now.year)
    try:
        _require_regular(path, shown)
        with path.open("rb") as stream:
            boot_line = _last_boot_line(stream) if options.since is None else 0
        window = _Window(first_line=boot_line, cutoff=_cutoff(options.since, now))
        notes = list(tried)
        if options.since is None and boot_line == 0:
            notes.append(f"no '{BOOT_BANNER.decode().strip()}' banner in {shown}: read whole")
        events = scan.scan_file(path, parser)
        return _finish(events, window, shown, since_text(options.since, now), parser, notes)
    except InputError as e:
        tried.append(str(e))
        return None


def _require_regular(path: Path, shown: str) -> None:
    """A FIFO or device would block the Job forever: only regular files are read."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise InputError(f"cannot read kernel log {shown}: {e.strerror or e}") from e
    if not stat.S_ISREG(mode):
        raise InputError(f"cannot read kernel log {shown}: not a regular file")


def _last_boot_line(stream: BinaryIO) -> int:
    """1-based number of the last line holding the boot banner; 0 when there is none."""
    keep = len(BOOT_BANNER) - 1  # a banner split across two chunks is still found
    last = lines_before = 0
    tail = b""
    while chunk := stream.read(scan.CHUNK_SIZE):
        data = tail + chunk
        if (hit := data.rfind(BOOT_BANNER)) >= 0:
            last = lines_before + data.count(b"\n", 0, hit) + 1
        cut = max(len(data) - keep, 0)
        lines_before += data.count(b"\n", 0, cut)
        tail = data[cut:]
    return last


def _cutoff(since: timedelta | None, now: datetime) -> datetime | None:
    return None if since is None else now - since


@dataclass(frozen=True, slots=True)
class _Window:
    """Which events count: from ``first_line`` (the boot's banner) on, stamped >= ``cutoff``."""

    first_line: int
    cutoff: datetime | None

    def holds(self, event: xid.KernelEvent) -> bool:
        if event.line_no < self.first_line:
            return False
        stamp = event.timestamp
        return self.cutoff is None or stamp is None or stamp >= self.cutoff


def _finish(
    events: Iterable[xid.KernelEvent],
    window: _Window,
    shown: str,
    since: str,
    parser: parse.XidLogParser,
    notes: list[str],
) -> KernelRead:
    """Count every event in the window; keep the latest KEEP_PER_KIND of each (kind, code, GPU)."""
    counts: Counter[str] = Counter()
    kept: dict[tuple[str, int | None, str | None], deque[xid.KernelEvent]] = {}
    undated = 0
    for event in events:
        if not window.holds(event):
            continue
        undated += window.cutoff is not None and event.timestamp is None
        counts[evidence.event_key(event)] += 1
        key = (event.kind, event.xid, event.pci)
        kept.setdefault(key, deque(maxlen=KEEP_PER_KIND)).append(event)
    retained = tuple(sorted((e for queue in kept.values() for e in queue), key=_line))
    if undated:
        notes = [*notes, f"{undated} event(s) without a readable time kept"]
    log = evidence.KernelLogRead(
        source=shown,
        since=since,
        lines_read=parser.stats.lines_read,
        malformed_lines=parser.stats.malformed,
        event_counts=dict(sorted(counts.items())),
        events_dropped=counts.total() - len(retained),
    )
    return KernelRead(retained, log, _read_item(log, notes))


def _line(event: xid.KernelEvent) -> int:
    return event.line_no


# ---- evidence ----------------------------------------------------------------------------------


def _read_item(log: evidence.KernelLogRead, notes: Iterable[str]) -> evidence.EvidenceItem:
    events = sum(log.event_counts.values())
    text = (
        f"{log.source}: {log.lines_read} lines, {events} GPU event(s) in {log.since}, "
        f"{log.malformed_lines} unreadable Xid line(s)"
    )
    if log.events_dropped:
        text += f", {log.events_dropped} repeated event(s) counted but not kept"
    return evidence.EvidenceItem("kernel-log", Status.PASS, "; ".join([text, *notes]))


def _unknown(tried: Iterable[str]) -> KernelRead:
    text = "no kernel log could be read: " + "; ".join(tried)
    return KernelRead((), None, evidence.EvidenceItem("kernel-log", Status.UNKNOWN, text))
