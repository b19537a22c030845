"""Escalation from the fault ledger (docs/design.md#fault-ledger): a card's 2nd fault asks for an
inspection, its 3rd for a replacement, and a slot where a new card fails again asks for a
riser/slot/power check; the drafted request names the history it rests on. What counts is
confirmed fault occurrences: the lines one fault leaves within the merge window are one, and
faults only observed in metrics never escalate."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.model import decisions, faults
from gpuguard.policy import escalation
from gpuguard.policy.escalation import Escalation

CARD_A = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"  # the seed's Xid 79 card
CARD_B = "GPU-2b3c4d5e-6f7a-8b9c-0d1e-2f3a4b5c6d7e"
CARD_C = "GPU-3c4d5e6f-7a8b-9c0d-1e2f-3a4b5c6d7e8f"
SLOT = "0000:99:00.0"
OTHER_SLOT = "0000:1b:00.0"


def fault(
    day: str,
    uuid: str | None = CARD_A,
    node: str = "gpu-node-b",
    pci: str | None = SLOT,
    recorder: faults.Recorder = faults.Recorder.GPUGUARD,
) -> faults.LedgerEntry:
    return faults.LedgerEntry(
        at=datetime.fromisoformat(f"{day}T06:00:00+00:00"),
        node=node,
        xid=79,
        pci=pci,
        uuid=uuid,
        recorder=recorder,
    )


# The seed's ledger on 23 September: the card's two Xid 79s, back-filled by hand.
SEED_LEDGER = (
    faults.LedgerEntry(
        at=datetime(2026, 9, 10, 13, 3, 59, tzinfo=UTC), node="gpu-node-b", xid=79, pci=SLOT,
        uuid=CARD_A, recorder=faults.Recorder.MANUAL,
    ),
    faults.LedgerEntry(
        at=datetime(2026, 9, 21, 5, 52, 44, tzinfo=UTC), node="gpu-node-b", xid=79, pci=SLOT,
        uuid=CARD_A, recorder=faults.Recorder.MANUAL,
    ),
)


def escalation_of(entries: list[faults.LedgerEntry], current: faults.LedgerEntry) -> Escalation:
    history = escalation.history_for(entries, current.uuid, current.node, current.pci)
    return escalation.escalate(history)


@pytest.mark.parametrize(
    ("ledger", "expected"),
    [
        pytest.param([fault("2026-09-10")], Escalation.NONE, id="first-fault-no-escalation"),
        pytest.param(
            [fault("2026-09-10"), fault("2026-09-21")], Escalation.INSPECTION,
            id="xid79-second-time-same-card-inspection",
        ),
        pytest.param(
            [fault("2026-09-10"), fault("2026-09-21"), fault("2026-10-02")],
            Escalation.REPLACEMENT, id="xid79-third-time-same-card-replacement",
        ),
        pytest.param(
            [fault(f"2026-10-{d:02d}") for d in (1, 5, 9, 13)], Escalation.REPLACEMENT,
            id="fourth-fault-still-replacement",
        ),
        pytest.param(
            [fault("2026-09-10", node="gpu-node-a", pci=OTHER_SLOT), fault("2026-09-21")],
            Escalation.INSPECTION, id="card-moved-to-another-node-history-follows-it",
        ),
        pytest.param(
            [fault("2026-09-10", uuid=CARD_B), fault("2026-09-21")], Escalation.SLOT_CHECK,
            id="new-card-same-slot-fails-again-slot-check",
        ),
        pytest.param(
            [fault("2026-09-10", uuid=CARD_B), fault("2026-09-21", uuid=CARD_C),
             fault("2026-09-25")],
            Escalation.SLOT_CHECK, id="third-card-same-slot-slot-check",
        ),
        pytest.param(
            [fault("2026-09-01", uuid=CARD_B), fault("2026-09-10"), fault("2026-09-21"),
             fault("2026-10-02")],
            Escalation.SLOT_CHECK, id="slot-check-outranks-replacement",
        ),
        pytest.param(
            [fault("2026-09-10", uuid=CARD_B, node="gpu-node-a"), fault("2026-09-21")],
            Escalation.NONE, id="same-pci-on-another-node-is-another-slot",
        ),
        pytest.param(
            [fault("2026-09-10", uuid=CARD_B, pci=OTHER_SLOT), fault("2026-09-21")],
            Escalation.NONE, id="other-card-in-another-slot-unrelated",
        ),
        pytest.param(
            [fault("2026-09-10", uuid=None), fault("2026-09-21", uuid=None)], Escalation.NONE,
            id="unknown-cards-are-not-counted-as-different-cards",
        ),
    ],
)
def test_escalation(ledger: list[faults.LedgerEntry], expected: Escalation) -> None:
    assert escalation_of(ledger, ledger[-1]) is expected


def test_card_fault_count_counts_the_card_on_every_node() -> None:
    entries = [
        fault("2026-09-10"), fault("2026-09-12", node="gpu-node-a", pci=OTHER_SLOT),
        fault("2026-09-13", uuid=CARD_B),
    ]
    assert escalation.card_fault_count(entries, CARD_A) == 2
    assert escalation.card_fault_count(entries, CARD_B) == 1
    assert escalation.card_fault_count(entries, CARD_C) == 0


def test_history_is_oldest_first_whatever_the_ledger_order() -> None:
    late, early = fault("2026-09-21"), fault("2026-09-10")
    history = escalation.history_for([late, early], CARD_A, "gpu-node-b", SLOT)
    assert history.card_faults == (early, late)
    assert history.slot_faults == (early, late)


def test_seed_third_xid79_of_the_card_drafts_a_replacement_request() -> None:
    third = fault("2026-10-02")
    entries = [*SEED_LEDGER, third]
    history = escalation.history_for(entries, CARD_A, "gpu-node-b", SLOT)
    level = escalation.escalate(history)
    text = escalation.request_text(third, decisions.Verdict.POWER_CYCLE, history, level)
    assert level is Escalation.REPLACEMENT
    assert text.startswith(f"gpu-node-b (slot {SLOT}, card {CARD_A}): Xid 79, GPU has fallen")
    assert "Verdict: power-cycle the node" in text
    assert "failed 3 times (2026-09-10 on gpu-node-b slot 0000:99:00.0, 2026-09-21 on " in text
    assert "2026-10-02 on gpu-node-b" in text
    assert "please replace it, do not return it to service" in text


def test_seed_second_xid79_drafts_an_inspection_request() -> None:
    history = escalation.history_for(SEED_LEDGER, CARD_A, "gpu-node-b", SLOT)
    text = escalation.request_text(
        SEED_LEDGER[1], decisions.Verdict.POWER_CYCLE, history, escalation.escalate(history)
    )
    assert "failed 2 times (2026-09-10 on gpu-node-b" in text
    assert "please inspect it" in text
    assert "replace" not in text


def test_new_card_failing_in_the_same_slot_asks_for_riser_slot_power_check() -> None:
    swapped_in = fault("2026-10-02", uuid=CARD_B)
    entries = [*SEED_LEDGER, swapped_in]
    history = escalation.history_for(entries, CARD_B, "gpu-node-b", SLOT)
    level = escalation.escalate(history)
    text = escalation.request_text(swapped_in, decisions.Verdict.POWER_CYCLE, history, level)
    assert level is Escalation.SLOT_CHECK
    assert "This is the card's first recorded fault." in text
    assert f"slot {SLOT} of gpu-node-b has failed with 2 different cards" in text
    assert f"2026-09-10 card {CARD_A}, 2026-09-21 card {CARD_A}, 2026-10-02 card {CARD_B}" in text
    assert "check the riser, the slot and its power" in text


def test_first_fault_request_states_slot_history_and_verdict_only() -> None:
    first = fault("2026-09-10", recorder=faults.Recorder.MANUAL)
    history = escalation.history_for([first], CARD_A, "gpu-node-b", SLOT)
    text = escalation.request_text(first, decisions.Verdict.GPU_RESET, history, Escalation.NONE)
    assert "Verdict: drain the pods using this GPU, then reset the GPU." in text
    assert "first recorded fault" in text
    assert f"History of the slot {SLOT} of gpu-node-b: 1 fault, all with this card (2026-09-10)." \
        in text


def test_slot_history_names_the_other_cards_that_failed_there() -> None:
    entries = [fault("2026-09-10", uuid=CARD_B, pci=SLOT), fault("2026-09-21", pci=OTHER_SLOT),
               fault("2026-09-22", pci=SLOT)]
    history = escalation.history_for(entries, CARD_A, "gpu-node-b", OTHER_SLOT)
    text = escalation.request_text(entries[1], decisions.Verdict.POWER_CYCLE, history,
                                   escalation.escalate(history))
    assert f"History of the slot {OTHER_SLOT} of gpu-node-b: 1 fault, all with this card" in text
    history = escalation.history_for(entries, CARD_A, "gpu-node-b", SLOT)
    text = escalation.request_text(entries[2], decisions.Verdict.POWER_CYCLE, history,
                                   escalation.escalate(history))
    assert f"has failed with 2 different cards (2026-09-10 card {CARD_B}, 2026-09-22 card" in text


def test_fault_without_xid_or_card_is_described_in_words() -> None:
    lost = faults.LedgerEntry(
        at=datetime(2026, 9, 10, tzinfo=UTC), node="gpu-node-b", xid=None, pci=None, uuid=None,
        recorder=faults.Recorder.GPUGUARD, kind=faults.FaultKind.FALLEN_OFF_BUS,
    )
    history = escalation.history_for([lost], None, "gpu-node-b", None)
    text = escalation.request_text(
        lost, decisions.Verdict.HUMAN_DIAGNOSIS, history, escalation.escalate(history)
    )
    assert text.startswith("gpu-node-b (slot unknown, card unknown): fallen off bus.")
    assert "UUID is unknown" in text
    assert "slot is unknown" in text


# --- occurrences: lines of one fault merged, only confirmed ones counted ---------------------

T0 = datetime(2026, 8, 10, 15, 36, tzinfo=UTC)  # ecc-dbe-five: the card's first DBE


def line(
    after: timedelta,
    confirmation: faults.Confirmation = faults.Confirmation.EVIDENCE,
    uuid: str | None = CARD_A,
    xid: int = 48,
    node: str = "gpu-node-a",
    pci: str | None = SLOT,
) -> faults.LedgerEntry:
    return faults.LedgerEntry(
        at=T0 + after, node=node, xid=xid, pci=pci, uuid=uuid,
        recorder=faults.Recorder.GPUGUARD, confirmation=confirmation,
        verdict=None if confirmation is faults.Confirmation.OBSERVED
        else decisions.Verdict.GPU_RESET,
    )


def seen_then_isolated(after: timedelta, uuid: str = CARD_A) -> list[faults.LedgerEntry]:
    """What the guard writes for one fault: an observed line when it first sees it, then the
    isolation line with the verdict a hold window (10 min) later."""
    return [line(after, faults.Confirmation.OBSERVED, uuid=uuid),
            line(after + timedelta(minutes=10), uuid=uuid)]


def test_observed_line_and_isolation_line_ten_minutes_later_are_one_confirmed_fault() -> None:
    entries = seen_then_isolated(timedelta(0))
    (occurrence,) = escalation.occurrences(entries)
    assert occurrence.confirmed
    assert occurrence.entry == entries[1]  # the confirmed line, with its verdict, speaks
    assert occurrence.at == T0
    history = escalation.history_for(entries, CARD_A, "gpu-node-a", SLOT)
    assert (history.card_faults, history.card_observed) == ((entries[1],), ())
    assert escalation.card_fault_count(entries, CARD_A) == 1
    assert escalation.escalate(history) is Escalation.NONE


def test_two_confirmed_faults_22_hours_apart_are_two() -> None:
    entries = [*seen_then_isolated(timedelta(0)), *seen_then_isolated(timedelta(hours=22))]
    assert escalation.card_fault_count(entries, CARD_A) == 2
    history = escalation.history_for(entries, CARD_A, "gpu-node-a", SLOT)
    assert escalation.escalate(history) is Escalation.INSPECTION


def test_lines_further_apart_than_the_merge_window_are_two_occurrences() -> None:
    entries = [line(timedelta(0), faults.Confirmation.OBSERVED), line(timedelta(minutes=20))]
    history = escalation.history_for(entries, CARD_A, "gpu-node-a", SLOT)
    assert (len(history.card_faults), len(history.card_observed)) == (1, 1)
    wide = escalation.history_for(entries, CARD_A, "gpu-node-a", SLOT,
                                  merge_window=timedelta(minutes=30))
    assert (len(wide.card_faults), len(wide.card_observed)) == (1, 0)


def test_a_longer_hold_window_widens_the_merge_window() -> None:
    hold = timedelta(minutes=30)
    entries = [line(timedelta(0), faults.Confirmation.DEVICE_PLUGIN), line(hold)]  # both confirm
    assert escalation.card_fault_count(entries, CARD_A) == 2  # the default window splits them
    window = escalation.merge_window_for(hold)
    assert escalation.card_fault_count(entries, CARD_A, merge_window=window) == 1


def test_the_window_counts_from_an_occurrences_first_line_so_a_stream_does_not_chain() -> None:
    stream = [line(timedelta(minutes=10 * n), faults.Confirmation.OBSERVED) for n in range(7)]
    found = escalation.occurrences(stream)
    assert [len(o.lines) for o in found] == [2, 2, 2, 1]  # 0+10, 20+30, 40+50, 60


def test_a_different_fault_or_card_at_the_same_time_is_another_occurrence() -> None:
    entries = [line(timedelta(0)), line(timedelta(minutes=1), xid=79),
               line(timedelta(minutes=2), uuid=CARD_B, pci=OTHER_SLOT)]
    assert len(escalation.occurrences(entries)) == 3


def test_a_line_without_uuid_merges_with_its_slot() -> None:
    entries = [line(timedelta(0), faults.Confirmation.OBSERVED, uuid=None),
               line(timedelta(minutes=5), uuid=None)]
    (occurrence,) = escalation.occurrences(entries)
    assert occurrence.confirmed
    history = escalation.history_for(entries, None, "gpu-node-a", SLOT)
    assert len(history.slot_faults) == 1


ECC_DBE_FIVE = (  # the card's five double-bit errors, as offsets from the first
    timedelta(0), timedelta(hours=21, minutes=49), timedelta(days=3, hours=21, minutes=25),
    timedelta(days=30, hours=13, minutes=46), timedelta(days=62, hours=18, minutes=35),
)


def test_five_dbe_faults_of_one_card_reach_replacement_at_the_third_confirmed() -> None:
    ledger: list[faults.LedgerEntry] = []
    levels = []
    for after in ECC_DBE_FIVE:
        ledger += seen_then_isolated(after)
        history = escalation.history_for(ledger, CARD_A, "gpu-node-a", SLOT)
        levels.append(escalation.escalate(history))
    assert levels == [Escalation.NONE, Escalation.INSPECTION, Escalation.REPLACEMENT,
                      Escalation.REPLACEMENT, Escalation.REPLACEMENT]
    assert escalation.card_fault_count(ledger, CARD_A) == 5


def test_a_metric_storm_of_observed_lines_on_20_cards_escalates_none() -> None:
    cards = [f"GPU-{n:08x}-6f7a-8b9c-0d1e-2f3a4b5c6d7e" for n in range(20)]
    storm = [
        line(timedelta(minutes=minutes), faults.Confirmation.OBSERVED, uuid=card, xid=79,
             node=f"gpu-node-{n:02d}")
        for n, card in enumerate(cards)
        for minutes in range(0, 6 * 60, 30)  # re-seen every 30 min for 6 hours
    ]
    assert escalation.card_fault_counts(storm) == {}
    for n, card in enumerate(cards):
        history = escalation.history_for(storm, card, f"gpu-node-{n:02d}", SLOT)
        assert escalation.escalate(history) is Escalation.NONE
        assert len(history.card_observed) == 12


def test_observed_faults_of_another_card_in_the_slot_do_not_ask_for_a_slot_check() -> None:
    entries = [line(timedelta(0), faults.Confirmation.OBSERVED, uuid=CARD_B),
               line(timedelta(days=1))]
    history = escalation.history_for(entries, CARD_A, "gpu-node-a", SLOT)
    assert escalation.escalate(history) is Escalation.NONE
    assert history.slot_cards == (CARD_A,)


def test_request_states_the_observed_unconfirmed_faults_apart() -> None:
    entries = [
        line(timedelta(0), faults.Confirmation.OBSERVED),
        line(timedelta(hours=5), faults.Confirmation.OBSERVED),
        line(timedelta(days=1), faults.Confirmation.OBSERVED, uuid=CARD_B),
        *seen_then_isolated(timedelta(days=2)),
        *seen_then_isolated(timedelta(days=3)),
    ]
    current = entries[-1]
    history = escalation.history_for(entries, CARD_A, "gpu-node-a", SLOT)
    level = escalation.escalate(history)
    text = escalation.request_text(current, decisions.Verdict.GPU_RESET, history, level)
    assert level is Escalation.INSPECTION
    assert "This card has failed 2 times (2026-08-12 on gpu-node-a" in text
    assert ("Plus 2 observed, unconfirmed faults of this card (2026-08-10 on gpu-node-a slot "
            f"{SLOT}, 2026-08-10 on gpu-node-a slot {SLOT}), not counted for escalation.") in text
    assert (f"Plus 1 observed, unconfirmed fault in slot {SLOT} of gpu-node-a (2026-08-11 card "
            f"{CARD_B}), not counted for escalation.") in text


def test_confirmations_that_count() -> None:
    counted = {c for c in faults.Confirmation if escalation.card_fault_count(
        [line(timedelta(0), c)], CARD_A)}
    assert counted == set(faults.Confirmation) - {faults.Confirmation.OBSERVED}


def test_a_failed_burnin_line_is_kept_but_not_counted_as_another_fault() -> None:
    kind = faults.FaultKind.BURNIN_FAILED
    burnin = dataclasses.replace(fault("2026-09-11"), xid=None, kind=kind)
    entries = [fault("2026-09-10"), burnin]
    assert escalation.card_fault_count(entries, CARD_A) == 1
    history = escalation.history_for(entries, CARD_A, "gpu-node-b", SLOT)
    assert escalation.escalate(history) is Escalation.NONE


def test_the_kernels_fallen_off_bus_and_xid79_of_one_fall_are_one_fault() -> None:
    # The agent reports both for one fall; counting them apart would ask for an inspection of
    # a card on its first fault.
    kernel = dataclasses.replace(
        line(timedelta(0), faults.Confirmation.KERNEL_LOG),
        xid=None, kind=faults.FaultKind.FALLEN_OFF_BUS,
    )
    entries = [kernel, line(timedelta(0), faults.Confirmation.DEVICE_PLUGIN, xid=79),
               line(timedelta(minutes=2), xid=79)]
    assert len(escalation.occurrences(entries)) == 1
    history = escalation.history_for(entries, CARD_A, "gpu-node-a", SLOT)
    assert escalation.escalate(history) is Escalation.NONE
    other_fault = line(timedelta(0), faults.Confirmation.DEVICE_PLUGIN, xid=48)
    assert len(escalation.occurrences([kernel, other_fault])) == 2


def test_a_code_nvidia_resolves_in_prose_carries_that_resolution_in_the_request() -> None:
    reduced = dataclasses.replace(fault("2026-10-02"), xid=168)
    history = escalation.history_for([reduced], CARD_A, "gpu-node-b", SLOT)
    text = escalation.request_text(reduced, decisions.Verdict.HUMAN_DIAGNOSIS, history,
                                   escalation.escalate(history))
    assert "Xid 168, Errors found in WPR" in text
    assert "NVIDIA's catalog says: Expected only with ECC disabled: enable ECC" in text
    plain = escalation.request_text(fault("2026-10-02"), decisions.Verdict.POWER_CYCLE, history,
                                    escalation.escalate(history))
    assert "NVIDIA's catalog says" not in plain


def test_a_fabric_fault_is_named_as_one_not_as_a_fall_off_the_bus() -> None:
    fabric = dataclasses.replace(fault("2026-10-02", uuid=None, pci=None), xid=None,
                                 kind=faults.FaultKind.FABRIC)
    history = escalation.history_for([fabric], None, "gpu-node-b", None)
    text = escalation.request_text(fabric, decisions.Verdict.HUMAN_DIAGNOSIS, history,
                                   escalation.escalate(history))
    assert text.startswith("gpu-node-b (slot unknown, card unknown): NVLink fabric fault")
