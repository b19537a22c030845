"""Kernel log lines → ``KernelEvent``s: the Xid parser shared by the node agent and the evidence
collector.

A kernel log is a stream with context: the ``GPU at PCI:...: GPU-<uuid>`` line names the card in a
slot for the Xid lines that follow it, and the "has fallen off the bus" message spans three
lines. ``XidLogParser`` holds that context for one stream; the agent feeds it journald lines one
by one, and ``kernlog.scan`` feeds it only the candidate lines of a file. It never raises on what
a line contains: unreadable lines are skipped and counted in ``stats``.

Importing this module costs next to nothing: the grammar (``messages``, ``stamps``) and the
event types (``model.xid``, dataclasses) are imported at the first ``NVRM:`` line, so ``gpuguard
xid parse`` on a log without one starts in the interpreter's own time (issue 28; checked by
tests/unit/test_cli_entry.py).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own flag, without importing typing (mypy reads either)
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from datetime import UTC, tzinfo

    from gpuguard.kernlog import messages, stamps
    from gpuguard.model import xid
_grammar_loaded = False  # set by _load_grammar: then messages, stamps, xid, UTC are names here

NVRM_MARKER = "NVRM:"
MALFORMED_SAMPLE_SIZE = 10
# The fall-off message's three lines come together; a start older than this many lines is stale.
_FALL_OFF_WINDOW_LINES = 4


class ParseStats:
    """What a parser has seen so far.

    ``lines_read`` is the number of input lines covered (a scanner that skips lines without
    ``NVRM`` still counts them); ``malformed`` counts lines that mention ``NVRM: Xid`` but could
    not be read, and ``first_malformed`` keeps the line numbers of the first few. A plain class,
    not a dataclass: importing dataclasses costs more than the rest of ``xid parse``'s start.
    """

    __slots__ = ("events", "first_malformed", "lines_read", "malformed")

    def __init__(
        self,
        lines_read: int = 0,
        events: int = 0,
        malformed: int = 0,
        first_malformed: list[int] | None = None,
    ) -> None:
        self.lines_read = lines_read
        self.events = events
        self.malformed = malformed
        self.first_malformed = [] if first_malformed is None else first_malformed

    def _fields(self) -> tuple[int, int, int, list[int]]:
        return self.lines_read, self.events, self.malformed, self.first_malformed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ParseStats) and self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaced

    def __repr__(self) -> str:
        return (
            f"ParseStats(lines_read={self.lines_read}, events={self.events}, "
            f"malformed={self.malformed}, first_malformed={self.first_malformed})"
        )


class _FallOffStart:
    """The first line of a "fallen off the bus" message, waiting for the line that ends it."""

    __slots__ = ("line_no", "pci", "stamp", "text")

    def __init__(self, line_no: int, pci: str | None, text: str, stamp: stamps.Stamp) -> None:
        self.line_no, self.pci, self.text, self.stamp = line_no, pci, text, stamp


class XidLogParser:
    """Reads one kernel-log stream, line by line, into ``KernelEvent``s.

    ``year`` dates syslog/journald lines (``Nov 29 11:28:11 host kernel: ...``), which carry no
    year: without it their ``timestamp`` is None. ``tz`` is the zone of times printed without
    one (``dmesg -T``, syslog); the default (None) is UTC.
    """

    def __init__(self, *, year: int | None = None, tz: tzinfo | None = None) -> None:
        self.stats = ParseStats()
        self._year = year
        self._tz = tz
        self._uuid_by_pci: dict[str, str | None] = {}
        self._fall_off: _FallOffStart | None = None

    def feed(self, line: str, line_no: int) -> xid.KernelEvent | None:
        """Read one line (``line_no`` is 1-based in the input); return its event, if any."""
        self.advance_to(line_no)
        marker = line.find(NVRM_MARKER)
        if marker < 0:
            return None
        text = line[marker + len(NVRM_MARKER) :].strip()
        if not _grammar_loaded:
            _load_grammar()
        event = self._read(text, line[:marker], line_no)
        if event is not None:
            self.stats.events += 1
        return event

    def advance_to(self, line_no: int) -> None:
        """Record that the stream has been read up to ``line_no`` (lines skipped unread)."""
        self.stats.lines_read = max(self.stats.lines_read, line_no)

    def _read(self, text: str, prefix: str, line_no: int) -> xid.KernelEvent | None:
        if text.startswith(messages.XID_MARKER):
            return self._xid_event(text, prefix, line_no)
        if (mapping := messages.read_gpu_at(text)) is not None:
            self._uuid_by_pci[mapping[0]] = mapping[1]
            return None
        if (start_pci := messages.read_fallen_off_start(text)) is not None:
            self._fall_off = _FallOffStart(line_no, start_pci, text, self._stamp(prefix))
            return None
        return self._fall_off_continuation(text, prefix, line_no)

    def _xid_event(self, text: str, prefix: str, line_no: int) -> xid.KernelEvent | None:
        fields = messages.read_xid(text)
        if fields is None:
            self._count_malformed(line_no)
            return None
        stamp = self._stamp(prefix)
        return xid.KernelEvent(
            line_no=line_no,
            kind=xid.KernelEventKind.XID,
            xid=fields.code,
            pci=fields.pci,
            message=fields.message,
            pid=fields.pid,
            process=fields.process,
            uuid=self._uuid_of(fields.pci),
            recovery_action=fields.recovery_action,
            reset_flags=fields.reset_flags,
            detail=fields.detail,
            address=fields.address,
            timestamp=stamp.timestamp,
            uptime_s=stamp.uptime_s,
        )

    def _fall_off_continuation(
        self, text: str, prefix: str, line_no: int
    ) -> xid.KernelEvent | None:
        start = self._fall_off
        if start is not None and line_no - start.line_no > _FALL_OFF_WINDOW_LINES:
            start = self._fall_off = None
        if not messages.says_fallen_off_bus(text):
            if start is not None:
                self._fall_off = _FallOffStart(
                    start.line_no, start.pci, f"{start.text} {text}", start.stamp
                )
            return None
        self._fall_off = None
        own_pci = messages.address_in(text)
        if start is None or (own_pci is not None and own_pci != start.pci):
            # A one-line form, or the message's first line was lost: this line stands alone.
            start = _FallOffStart(line_no, own_pci, "", self._stamp(prefix))
        return self._fall_off_event(start, text)

    def _fall_off_event(self, start: _FallOffStart, last_text: str) -> xid.KernelEvent:
        return xid.KernelEvent(
            line_no=start.line_no,
            kind=xid.KernelEventKind.FALLEN_OFF_BUS,
            xid=None,
            pci=start.pci,
            message=f"{start.text} {last_text}".strip(),
            uuid=self._uuid_of(start.pci),
            timestamp=start.stamp.timestamp,
            uptime_s=start.stamp.uptime_s,
        )

    def _uuid_of(self, pci: str | None) -> str | None:
        return self._uuid_by_pci.get(pci) if pci is not None else None

    def _stamp(self, prefix: str) -> stamps.Stamp:
        return stamps.read_stamp(prefix, year=self._year, tz=UTC if self._tz is None else self._tz)

    def _count_malformed(self, line_no: int) -> None:
        self.stats.malformed += 1
        if len(self.stats.first_malformed) < MALFORMED_SAMPLE_SIZE:
            self.stats.first_malformed.append(line_no)


def _load_grammar() -> None:
    """Import the grammar and the event types, once, at the first ``NVRM:`` line (module
    docstring): as module names, so reading a line costs no import statement."""
    global _grammar_loaded, messages, stamps, xid, UTC  # noqa: PLW0603 - imported late, once
    from datetime import UTC

    from gpuguard.kernlog import messages, stamps
    from gpuguard.model import xid

    _grammar_loaded = True


def parse_lines(
    lines: Iterable[str], parser: XidLogParser | None = None
) -> Iterator[xid.KernelEvent]:
    """Every event in ``lines`` (numbered from 1), read by ``parser`` or a fresh one."""
    reader = parser if parser is not None else XidLogParser()
    for line_no, line in enumerate(lines, start=1):
        event = reader.feed(line, line_no)
        if event is not None:
            yield event
