"""Kernel-log lines from anywhere (a driver we have not seen, a corrupted journal, another
program writing ``NVRM``) never crash the Xid parser: a line is an event, skipped, or counted
as malformed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuguard.kernlog import messages, parse

PCI = st.from_regex(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(\.[0-9])?", fullmatch=True)
PREFIX = st.sampled_from(
    ["", "[ 1234.567890] ", "Nov 29 11:28:11 gpu-node-b kernel: ", "2026-09-21T05:53:00+00:00 ",
     "[Sat Sep 21 05:53:00 2026] ", "<4>"]
)
NVRM_LINE = st.builds(
    lambda prefix, pci, code, rest: f"{prefix}NVRM: Xid (PCI:{pci}): {code}, {rest}",
    PREFIX, st.one_of(PCI, st.text(max_size=20)),
    st.one_of(st.integers(-5, 100_000).map(str), st.text(max_size=6)), st.text(max_size=80),
)  # fmt: skip
LINE = st.one_of(st.text(max_size=200), NVRM_LINE, st.builds(str.__add__, PREFIX, st.text()))


@given(st.lists(LINE, max_size=30))
def test_any_lines_are_events_skips_or_counted_malformed(lines: list[str]) -> None:
    parser = parse.XidLogParser(year=2026)
    events = list(parse.parse_lines(lines, parser))
    assert parser.stats.lines_read <= len(lines)
    assert parser.stats.malformed + len(events) <= 3 * len(lines)
    for event in events:
        assert event.xid is None or 0 <= event.xid < 100_000
        assert 1 <= event.line_no <= len(lines)


@given(st.text(max_size=300))
def test_reading_one_xid_message_never_raises(text: str) -> None:
    fields = messages.read_xid(text)
    assert fields is None or isinstance(fields.code, int)
