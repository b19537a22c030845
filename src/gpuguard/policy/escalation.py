"""Escalation from the fault ledger: how often this card and this slot have failed, what to ask
the infra team for, and the drafted request text (docs/design.md#fault-ledger).

A card's history is counted by GPU UUID across every node (it follows the card when it moves);
a slot's history by PCI address within one node. The histories include the fault being
reported: record it in the ledger first, then draft the request.

What is counted is *confirmed occurrences*, not lines. One fault leaves several lines: the
controller records it when first seen, and the recovery step records the isolation with its
verdict a hold window later. Lines of the same node, the same card (UUID, else PCI slot) and
the same fault whose times lie within ``merge_window`` of the occurrence's first line are one
occurrence, confirmed if any of its lines is (``faults.Confirmation``). Observed-only
occurrences (metrics alone) never escalate, so a storm of bad metrics leaves healthy cards
alone; the drafted request still lists them, so people see the whole history.

- the card's 1st fault: no escalation, the verdict's repair alone;
- the card's 2nd fault: ask for an inspection;
- the card's 3rd and later: ask for a replacement; never return it to service;
- the slot saw faults from two or more different cards (a new card failed where the old one
  did): ask for a riser / slot / power check.

A failed burn-in's line (kind ``burnin_failed``) is a test of a fault already counted, not a
new fault: it is kept in the card's record but never counted here.

When a slot check and a card escalation both apply, ``escalate`` returns SLOT_CHECK: fitting
yet another card into a bad slot repeats the incident, so the slot comes first. The request
text still states the card's count and asks for its inspection or replacement as well.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import decisions, faults

INSPECTION_AT = 2
REPLACEMENT_AT = 3
SLOT_CHECK_CARDS = 2
MERGE_SLACK = timedelta(minutes=5)  # ticks and API latency between first sight and isolation


def merge_window_for(hold_window: timedelta) -> timedelta:
    """How far apart the lines of one fault can be: the isolation line comes a hold window
    after the first-seen line, plus slack (docs/ledger.md)."""
    return hold_window + MERGE_SLACK


DEFAULT_MERGE_WINDOW = merge_window_for(timedelta(minutes=10))  # the default hold window


class Escalation(StrEnum):
    NONE = "none"
    INSPECTION = "inspection"
    REPLACEMENT = "replacement"
    SLOT_CHECK = "slot-check"


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One fault of one card as the ledger saw it: its lines, oldest first."""

    lines: tuple[faults.LedgerEntry, ...]

    @property
    def confirmed(self) -> bool:
        return any(line.confirmed for line in self.lines)

    @property
    def entry(self) -> faults.LedgerEntry:
        """The line that speaks for it: the first confirmed one (it carries the verdict), else
        the first."""
        return next((line for line in self.lines if line.confirmed), self.lines[0])

    @property
    def at(self) -> datetime:
        return self.lines[0].at


def occurrences(
    entries: Iterable[faults.LedgerEntry], merge_window: timedelta = DEFAULT_MERGE_WINDOW
) -> tuple[Occurrence, ...]:
    """The ledger's lines grouped into fault occurrences (see the module docstring), in order
    of their first line."""
    runs: dict[_Key, list[list[faults.LedgerEntry]]] = {}
    for entry in sorted((e for e in entries if _is_fault(e)), key=_line_order):
        same = runs.setdefault(_key(entry), [])
        if same and entry.at - same[-1][0].at <= merge_window:
            same[-1].append(entry)
        else:
            same.append([entry])
    found = (Occurrence(tuple(run)) for group in runs.values() for run in group)
    return tuple(sorted(found, key=lambda o: _line_order(o.lines[0])))


_Key = tuple[str, str | None, int | None, faults.FaultKind]


def same_fault(a: faults.LedgerEntry, b: faults.LedgerEntry) -> bool:
    """The two lines can be one occurrence: same node, card and fault (``_key``)."""
    return _key(a) == _key(b)


def _key(entry: faults.LedgerEntry) -> _Key:
    """Lines of one occurrence share node, card (UUID, else slot) and fault (Xid 79 and the
    kernel's "fallen off the bus" are one fault: ``faults.fault_identity``)."""
    kind, xid = faults.fault_identity(entry.kind, entry.xid)
    return entry.node, entry.uuid or entry.pci, xid, kind


def _line_order(entry: faults.LedgerEntry) -> tuple[datetime, str, str, str]:
    return entry.at, entry.node, entry.uuid or "", entry.pci or ""


@dataclass(frozen=True, slots=True)
class CardHistory:
    """One card's fault occurrences (any node, any slot) and one slot's (one node), oldest
    first, each as the line that speaks for it: confirmed ones count, observed-only ones are
    there for people to read."""

    card_faults: tuple[faults.LedgerEntry, ...]
    slot_faults: tuple[faults.LedgerEntry, ...]
    card_observed: tuple[faults.LedgerEntry, ...] = ()
    slot_observed: tuple[faults.LedgerEntry, ...] = ()

    @property
    def slot_cards(self) -> tuple[str, ...]:
        """The distinct known cards with a confirmed fault in the slot, in order of the first."""
        return tuple(dict.fromkeys(e.uuid for e in self.slot_faults if e.uuid))


def card_fault_counts(
    entries: Iterable[faults.LedgerEntry], merge_window: timedelta = DEFAULT_MERGE_WINDOW
) -> Counter[str]:
    """Confirmed fault occurrences per card UUID, across all nodes and slots."""
    return Counter(
        o.entry.uuid for o in occurrences(entries, merge_window) if o.confirmed and o.entry.uuid
    )


def card_fault_count(
    entries: Iterable[faults.LedgerEntry],
    uuid: str,
    *,
    merge_window: timedelta = DEFAULT_MERGE_WINDOW,
) -> int:
    """How many confirmed faults the ledger holds for this card, across all nodes and slots."""
    return card_fault_counts((e for e in entries if e.uuid == uuid), merge_window)[uuid]


def history_for(
    entries: Iterable[faults.LedgerEntry],
    uuid: str | None,
    node: str,
    pci: str | None,
    *,
    merge_window: timedelta = DEFAULT_MERGE_WINDOW,
) -> CardHistory:
    """The card's occurrences by UUID (none when the card is unknown) and the slot's by PCI
    address on ``node`` (none when the slot is unknown), confirmed and observed apart."""
    lines = list(entries)

    def card_line(e: faults.LedgerEntry) -> bool:
        return uuid is not None and e.uuid == uuid

    def slot_line(e: faults.LedgerEntry) -> bool:
        return pci is not None and (e.node, e.pci) == (node, pci)

    wanted = {_key(e) for e in lines if card_line(e) or slot_line(e)}  # the rest cannot merge in
    found = occurrences((e for e in lines if _key(e) in wanted), merge_window)
    card = [o for o in found if any(card_line(e) for e in o.lines)]
    slot = [o for o in found if any(slot_line(e) for e in o.lines)]
    return CardHistory(
        card_faults=_speakers(card, confirmed=True),
        slot_faults=_speakers(slot, confirmed=True),
        card_observed=_speakers(card, confirmed=False),
        slot_observed=_speakers(slot, confirmed=False),
    )


def _speakers(found: Sequence[Occurrence], *, confirmed: bool) -> tuple[faults.LedgerEntry, ...]:
    return tuple(o.entry for o in found if o.confirmed is confirmed)


def _is_fault(entry: faults.LedgerEntry) -> bool:
    return entry.kind not in faults.NOT_FAULTS


def escalate(history: CardHistory) -> Escalation:
    """What to ask for beyond the verdict's repair; see the module docstring for precedence."""
    if len(history.slot_cards) >= SLOT_CHECK_CARDS:
        return Escalation.SLOT_CHECK
    return _card_escalation(len(history.card_faults))


def _card_escalation(count: int) -> Escalation:
    if count >= REPLACEMENT_AT:
        return Escalation.REPLACEMENT
    if count >= INSPECTION_AT:
        return Escalation.INSPECTION
    return Escalation.NONE


_VERDICT_WORDS = {
    decisions.Verdict.POWER_CYCLE: (
        "power-cycle the node (power off, then on: a soft reboot hangs waiting for the dead GPU)"
    ),
    decisions.Verdict.GPU_RESET: "drain the pods using this GPU, then reset the GPU",
    decisions.Verdict.RMA: "replace the card (RMA): a reset or power cycle will not recover it",
    decisions.Verdict.HUMAN_DIAGNOSIS: "diagnose by hand from the Xid catalog and the records",
}


def request_text(
    entry: faults.LedgerEntry,
    verdict: decisions.Verdict,
    history: CardHistory,
    escalation: Escalation,
    *,
    catalog: xid_catalog.XidCatalog | None = None,
) -> str:
    """The drafted request for the infra team, in plain words, with the card's and the slot's
    history. ``catalog`` names the Xid (default: the packaged catalog)."""
    known = catalog or xid_catalog.load_catalog()
    sentences = [
        f"{_where(entry)}: {_fault_words(entry, known)}.",
        f"Verdict: {_VERDICT_WORDS[verdict]}.",
        _resolution_sentence(entry, known),
        _card_sentence(entry, history),
        _observed_sentence("of this card", _card_list(history.card_observed)),
        _slot_sentence(entry, history, escalation),
        _observed_sentence(
            f"in slot {entry.pci} of {entry.node}", _slot_list(_slot_only(entry, history))
        ),
    ]
    return " ".join(sentence for sentence in sentences if sentence)


def _resolution_sentence(entry: faults.LedgerEntry, catalog: xid_catalog.XidCatalog) -> str:
    """NVIDIA's resolution prose for codes its catalog gives no bucket (Xid 168: enable ECC)."""
    said = catalog.entry(entry.xid).resolution if entry.xid is not None else ""
    return f"NVIDIA's catalog says: {said}" if said else ""


def _where(entry: faults.LedgerEntry) -> str:
    return f"{entry.node} (slot {entry.pci or 'unknown'}, card {entry.uuid or 'unknown'})"


def _fault_words(entry: faults.LedgerEntry, catalog: xid_catalog.XidCatalog) -> str:
    if entry.kind is faults.FaultKind.FABRIC:
        return "NVLink fabric fault (a fatal NVSwitch SXid or a failed fabric registration)"
    if entry.xid is None:
        return str(entry.kind).replace("_", " ")
    return f"Xid {entry.xid}, {catalog.entry(entry.xid).name}"


def _card_sentence(entry: faults.LedgerEntry, history: CardHistory) -> str:
    if entry.uuid is None:
        return "The card's UUID is unknown, so its history cannot be counted."
    count = len(history.card_faults)
    listed = ", ".join(_card_list(history.card_faults))
    match _card_escalation(count):
        case Escalation.REPLACEMENT:
            return (
                f"This card has failed {count} times ({listed}): please replace it, "
                "do not return it to service."
            )
        case Escalation.INSPECTION:
            return (
                f"This card has failed {count} times ({listed}): please inspect it (reseat it, "
                "check its power cables and cooling) before it returns to service."
            )
        case _ if count == 1:
            return "This is the card's first recorded fault."
        case _:
            return "The card has no confirmed fault recorded."


def _observed_sentence(whose: str, listed: list[str]) -> str:
    if not listed:
        return ""
    count = _times(len(listed), "observed, unconfirmed fault")
    return f"Plus {count} {whose} ({', '.join(listed)}), not counted for escalation."


def _slot_only(entry: faults.LedgerEntry, history: CardHistory) -> tuple[faults.LedgerEntry, ...]:
    """The slot's observed-only faults the card's sentence did not already state."""
    if entry.pci is None:
        return ()
    return tuple(e for e in history.slot_observed if e not in history.card_observed)


def _slot_sentence(entry: faults.LedgerEntry, history: CardHistory, escalation: Escalation) -> str:
    if entry.pci is None:
        return "The slot is unknown, so its history cannot be counted."
    where = f"slot {entry.pci} of {entry.node}"
    listed = ", ".join(_slot_list(history.slot_faults))
    if escalation is Escalation.SLOT_CHECK:
        return (
            f"The {where} has failed with {len(history.slot_cards)} different cards ({listed}): "
            "please check the riser, the slot and its power before fitting another card."
        )
    count = _times(len(history.slot_faults), "fault")
    if history.slot_cards == (entry.uuid,):
        days = ", ".join(_day(e) for e in history.slot_faults)
        return f"History of the {where}: {count}, all with this card ({days})."
    return f"History of the {where}: {count} ({listed})."


def _times(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _card_list(entries: tuple[faults.LedgerEntry, ...]) -> list[str]:
    return [f"{_day(e)} on {e.node} slot {e.pci or 'unknown'}" for e in entries]


def _slot_list(entries: tuple[faults.LedgerEntry, ...]) -> list[str]:
    return [f"{_day(e)} card {e.uuid or 'unknown'}" for e in entries]


def _day(entry: faults.LedgerEntry) -> str:
    return entry.at.date().isoformat()
