"""Ledger lines live in ConfigMaps anyone with edit rights can change: any line is an entry
or one malformed record naming its ConfigMap, key, line and text; and every entry gpuguard
writes reads back as itself."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from gpuguard.actuators import ledger
from gpuguard.errors import InputError
from gpuguard.model import decisions, faults

NODE = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,30}[a-z0-9])?", fullmatch=True)
TOKEN = st.one_of(
    st.sampled_from(["2026-09-21T05:53:00Z", "xid-79", "xid-²", "fallen_off_bus", "-",
                     "0000:99:00.0", "GPU-1a2b3c4d", "gpuguard", "manual", "power-cycle",
                     "burnin_failed", "9999-99-99T99:99:99Z"]),
    st.text(max_size=12),
)  # fmt: skip
LINE = st.one_of(st.lists(TOKEN, max_size=7).map(" ".join), st.text(max_size=80))
ENTRY = st.builds(
    lambda **fields: faults.LedgerEntry(**fields | (
        {"kind": faults.FaultKind.XID} if fields["xid"] is not None else {})),
    at=st.datetimes(datetime(2000, 1, 1), datetime(2099, 1, 1), timezones=st.just(UTC))
    .map(lambda t: t.replace(microsecond=0)),
    node=NODE,
    xid=st.one_of(st.none(), st.integers(1, 999)),
    pci=st.one_of(st.none(), st.builds("0000:{:02x}:{:02x}.{}".format,
                                       st.integers(0, 255), st.integers(0, 31), st.integers(0, 7))),
    uuid=st.one_of(st.none(), st.uuids().map(lambda u: f"GPU-{u}")),
    recorder=st.sampled_from(list(faults.Recorder)),
    verdict=st.one_of(st.none(), st.sampled_from(list(decisions.Verdict))),
    kind=st.sampled_from([k for k in faults.FaultKind if k is not faults.FaultKind.XID]),
)


@given(st.dictionaries(NODE, st.lists(LINE, max_size=4).map("\n".join), max_size=3))
def test_any_configmap_data_is_entries_or_named_malformed_lines(data: dict[str, str]) -> None:
    read = ledger.parse_data("gpuguard-ledger-2026-09-0", data)
    lines = [line for text in data.values() for line in text.splitlines()]
    assert len(read.entries) + len(read.malformed) <= len(lines)
    for problem in read.malformed:
        assert problem.startswith("ConfigMap gpuguard-ledger-2026-09-0 key ")


@given(NODE, LINE)
def test_one_line_is_an_entry_or_an_input_error(node: str, line: str) -> None:
    try:
        entry = ledger.parse_line(node, line)
    except InputError:
        return
    assert entry.node == node
    assert entry.at.tzinfo is not None


@given(ENTRY)
def test_every_entry_gpuguard_writes_reads_back_as_itself(entry: faults.LedgerEntry) -> None:
    assert ledger.parse_line(entry.node, ledger.format_line(entry)) == entry
