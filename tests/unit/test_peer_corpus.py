"""gpuguard's kernel-log reading held to test data it did not write: every line of gpud's own
kernel-log test tables (tests/data/peers/gpud_kernel_lines.tsv, with gpud's expected Xid,
PCI address, NVLink5 unit, severity, link, register words and Warning/Fatal verdict).

Each expectation is one comparison. A disagreement is either fixed in gpuguard or listed in
``JUSTIFIED`` with why gpuguard reads the line otherwise, NVIDIA's documentation as the judge
(docs/xid-events.md, "Held to the peers' test data"); the test fails on any other.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuguard.catalog import xid as catalog_xid
from gpuguard.kernlog import messages, parse
from gpuguard.model import pci as pci_model
from gpuguard.model import xid as xid_model

CORPUS = Path(__file__).resolve().parents[1] / "data" / "peers" / "gpud_kernel_lines.tsv"
CATALOG = catalog_xid.packaged_catalog()
SHEET = "NVIDIA's XID 144-150 Decode sheet (src/gpuguard/catalog/reference/nvlink5_decode.tsv)"
JUSTIFIED = {
    **{
        (f"146_{unit}_fatal", "fatal"): f"{SHEET}: {unit.replace('_PIPE', '/TLW_')} error "
        "status 0x00000004 is RESET_GPU, Fatal; gpud's test expects Warning"
        for unit in ("TLW_RX_PIPE0", "TLW_RX_PIPE1", "TLW_TX_PIPE0", "TLW_TX_PIPE1")
    },
    ("fallen-off-bus text without valid BDF is ignored", "read"): "the kernel says a GPU fell "
    "off the bus (NVIDIA: Xid 79's message, RESTART_BM); gpuguard reads the event with an "
    "unknown slot and keeps the text rather than drop the one line that matters most",
    ("unknown SXid code", "read"): "gpud drops an SXid code its table lacks; gpuguard counts "
    "every SXid line, as it counts an Xid it does not know (an unknown code is never dropped)",
}
AGREED, COMPARED = 216, 222  # pinned: a change in either is a change in the closing figures


@dataclass(frozen=True, slots=True)
class Comparison:
    case: str
    field: str
    gpud: object
    gpuguard: object

    @property
    def agrees(self) -> bool:
        return self.gpud == self.gpuguard


def rows() -> list[dict[str, str]]:
    text = CORPUS.read_text(encoding="utf-8").splitlines()
    return list(csv.DictReader([x for x in text if not x.startswith("#")], delimiter="\t"))


def comparisons() -> Iterator[Comparison]:
    for row in rows():
        read = _sxid_fields if "/sxid/" in row["file"] else _xid_fields
        for field, gpud, ours in read(row):
            yield Comparison(row["case"], field, gpud, ours)


Fields = Iterator[tuple[str, object, object]]


def _sxid_fields(row: dict[str, str]) -> Fields:
    found = messages.read_sxid(row["line"])
    if row["expect_nil"] == "true":
        yield "read", False, found is not None
    if row["xid"]:
        yield "sxid", int(row["xid"]), found.code if found else 0
    if row["pci"]:
        yield "pci", _pci(row["pci"]), found.pci if found else None


def _xid_fields(row: dict[str, str]) -> Fields:
    events = list(parse.parse_lines(row["line"].split("\\n")))
    event = events[0] if events else None
    if row["expect_nil"] == "true" or row["should_match"] == "false":
        yield "read", False, event is not None
    if row["xid"]:
        yield "xid", int(row["xid"]), _code(event)
    if row["pci"]:
        yield "pci", _pci(row["pci"]), event.pci if event else None
    yield from _detail_fields(row, event)
    if row["event_type"]:
        yield "fatal", row["event_type"] == "Fatal", _hardware(event)


Reader = Callable[[xid_model.EventDetail], object]
_DETAIL: tuple[tuple[str, Callable[[str], object], Reader], ...] = (
    ("unit", str, lambda d: d.unit),
    ("severity", str, lambda d: d.severity),
    ("link", int, lambda d: d.link),
    ("intrinfo", lambda v: int(v, 0), lambda d: d.words[0]),
    ("error_status", lambda v: int(v, 0), lambda d: d.words[1]),
)


def _detail_fields(row: dict[str, str], event: xid_model.KernelEvent | None) -> Fields:
    detail = event.detail if event else None
    for field, theirs, ours in _DETAIL:
        if row[field]:
            yield field, theirs(row[field]), ours(detail) if detail else None


def _code(event: xid_model.KernelEvent | None) -> int:
    """gpud maps the fall-off message to 79, as gpuguard's fault identity does."""
    if event is None:
        return 0
    return 79 if event.kind is xid_model.KernelEventKind.FALLEN_OFF_BUS else event.xid or 0


def _pci(text: str) -> str | None:
    return pci_model.try_normalize_pci(text) if text else None


def _hardware(event: xid_model.KernelEvent | None) -> bool:
    if event is None or event.xid is None:
        return False
    judged = CATALOG.rules.judge(event) if CATALOG.rules else None
    return CATALOG.is_hardware_event(event.xid, judged.rule if judged else "")


def test_every_disagreement_with_gpuds_tests_is_justified() -> None:
    disagreements = {(c.case, c.field) for c in comparisons() if not c.agrees}
    assert disagreements == set(JUSTIFIED)


def test_agreement_figures() -> None:
    found = list(comparisons())
    assert (sum(c.agrees for c in found), len(found)) == (AGREED, COMPARED)
    assert len(rows()) == 95  # 16 SXid lines, 79 NVRM lines (one of them three kernel lines)
