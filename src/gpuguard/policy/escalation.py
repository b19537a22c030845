"""Escalation from the fault ledger: how often this card and this slot have failed, what to ask
the infra team for, and the drafted request text (seed 004 "장애 원장", DESIGN §6).

A card's history is counted by GPU UUID across every node (it follows the card when it moves);
a slot's history by PCI address within one node. The histories include the fault being
reported: record it in the ledger first, then draft the request.

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

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import decisions, faults

INSPECTION_AT = 2
REPLACEMENT_AT = 3
SLOT_CHECK_CARDS = 2


class Escalation(StrEnum):
    NONE = "none"
    INSPECTION = "inspection"
    REPLACEMENT = "replacement"
    SLOT_CHECK = "slot-check"


@dataclass(frozen=True, slots=True)
class CardHistory:
    """Ledger entries of one card (any node, any slot) and of one slot (one node), oldest first."""

    card_faults: tuple[faults.LedgerEntry, ...]
    slot_faults: tuple[faults.LedgerEntry, ...]

    @property
    def slot_cards(self) -> tuple[str, ...]:
        """The distinct known cards that failed in the slot, in order of their first fault."""
        return tuple(dict.fromkeys(e.uuid for e in self.slot_faults if e.uuid))


def card_fault_count(entries: Iterable[faults.LedgerEntry], uuid: str) -> int:
    """How many faults the ledger holds for this card, across all nodes and slots."""
    return sum(1 for entry in entries if entry.uuid == uuid and _is_fault(entry))


def history_for(
    entries: Iterable[faults.LedgerEntry], uuid: str | None, node: str, pci: str | None
) -> CardHistory:
    """The card's faults by UUID (none when the card is unknown) and the slot's faults by PCI
    address on ``node`` (none when the slot is unknown)."""
    ordered = sorted((e for e in entries if _is_fault(e)), key=lambda e: (e.at, e.node))
    card = tuple(e for e in ordered if uuid is not None and e.uuid == uuid)
    slot = tuple(e for e in ordered if pci is not None and e.node == node and e.pci == pci)
    return CardHistory(card_faults=card, slot_faults=slot)


def _is_fault(entry: faults.LedgerEntry) -> bool:
    return entry.kind is not faults.FaultKind.BURNIN_FAILED


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
    sentences = [
        f"{_where(entry)}: {_fault_words(entry, catalog or xid_catalog.load_catalog())}.",
        f"Verdict: {_VERDICT_WORDS[verdict]}.",
        _card_sentence(entry, history),
        _slot_sentence(entry, history, escalation),
    ]
    return " ".join(sentence for sentence in sentences if sentence)


def _where(entry: faults.LedgerEntry) -> str:
    return f"{entry.node} (slot {entry.pci or 'unknown'}, card {entry.uuid or 'unknown'})"


def _fault_words(entry: faults.LedgerEntry, catalog: xid_catalog.XidCatalog) -> str:
    if entry.xid is None:
        return str(entry.kind).replace("_", " ")
    return f"Xid {entry.xid}, {catalog.entry(entry.xid).name}"


def _card_sentence(entry: faults.LedgerEntry, history: CardHistory) -> str:
    if entry.uuid is None:
        return "The card's UUID is unknown, so its history cannot be counted."
    count = len(history.card_faults)
    listed = _card_list(history.card_faults)
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
        case _:
            return "This is the card's first recorded fault."


def _slot_sentence(entry: faults.LedgerEntry, history: CardHistory, escalation: Escalation) -> str:
    if entry.pci is None:
        return "The slot is unknown, so its history cannot be counted."
    where = f"slot {entry.pci} of {entry.node}"
    listed = _slot_list(history.slot_faults)
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


def _card_list(entries: tuple[faults.LedgerEntry, ...]) -> str:
    return ", ".join(f"{_day(e)} on {e.node} slot {e.pci or 'unknown'}" for e in entries)


def _slot_list(entries: tuple[faults.LedgerEntry, ...]) -> str:
    return ", ".join(f"{_day(e)} card {e.uuid or 'unknown'}" for e in entries)


def _day(entry: faults.LedgerEntry) -> str:
    return entry.at.date().isoformat()
