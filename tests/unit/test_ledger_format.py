"""The ledger's line format (the lifecycle report's [docs/design.md#incidents] columns and the
confirmation column), strict parsing that reports and skips bad lines, audit lines and how
reading applies them, segment filling under the size cap, and the retry policy for 409s."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpuguard.actuators import ledger
from gpuguard.errors import ConflictError, GpuguardError, InputError
from gpuguard.model import decisions, faults

CARD = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
SEED_LINE = f"2026-09-10T13:03:59Z xid-79 0000:99:00.0 {CARD} manual"  # before confirmation


def entry(**changes: object) -> faults.LedgerEntry:
    fields: dict[str, object] = {
        "at": datetime(2026, 9, 10, 13, 3, 59, tzinfo=UTC),
        "node": "gpu-node-b",
        "xid": 79,
        "pci": "0000:99:00.0",
        "uuid": CARD,
        "recorder": faults.Recorder.MANUAL,
        "confirmation": faults.Confirmation.MANUAL,
    }
    fields.update(changes)
    return faults.LedgerEntry(**fields)  # type: ignore[arg-type]


def test_seed_line_parses_to_the_seed_fault_confirmed_by_a_person() -> None:
    assert ledger.parse_line("gpu-node-b", SEED_LINE) == entry()


@pytest.mark.parametrize(
    ("item", "line"),
    [
        pytest.param(entry(), f"{SEED_LINE} confirmed-by-person", id="seed-manual-xid79"),
        pytest.param(
            entry(recorder=faults.Recorder.GPUGUARD, verdict=decisions.Verdict.POWER_CYCLE,
                  confirmation=faults.Confirmation.EVIDENCE),
            f"2026-09-10T13:03:59Z xid-79 0000:99:00.0 {CARD} gpuguard power-cycle "
            "confirmed-by-evidence",
            id="guard-line-with-verdict",
        ),
        pytest.param(
            entry(recorder=faults.Recorder.GPUGUARD, confirmation=faults.Confirmation.OBSERVED),
            f"2026-09-10T13:03:59Z xid-79 0000:99:00.0 {CARD} gpuguard observed",
            id="observed-without-verdict",
        ),
        pytest.param(
            entry(xid=None, kind=faults.FaultKind.FALLEN_OFF_BUS, uuid=None,
                  recorder=faults.Recorder.GPUGUARD,
                  confirmation=faults.Confirmation.KERNEL_LOG),
            "2026-09-10T13:03:59Z fallen_off_bus 0000:99:00.0 - gpuguard confirmed-by-kernel-log",
            id="gpu-lost-without-xid-unknown-card",
        ),
        pytest.param(
            entry(at=datetime(2026, 9, 10, 22, 3, 59, tzinfo=timezone(timedelta(hours=9))),
                  pci=None),
            f"2026-09-10T13:03:59Z xid-79 - {CARD} manual confirmed-by-person",
            id="kst-time-written-in-utc",
        ),
    ],
)
def test_format_and_parse_round_trip(item: faults.LedgerEntry, line: str) -> None:
    assert ledger.format_line(item) == line
    assert ledger.parse_line(item.node, line) == item


@pytest.mark.parametrize(
    ("line", "confirmation", "verdict"),
    [
        pytest.param(SEED_LINE, faults.Confirmation.MANUAL, None, id="manual"),
        pytest.param(SEED_LINE + " rma", faults.Confirmation.MANUAL, decisions.Verdict.RMA,
                     id="manual-with-verdict"),
        pytest.param(SEED_LINE.replace("manual", "gpuguard") + " power-cycle",
                     faults.Confirmation.EVIDENCE, decisions.Verdict.POWER_CYCLE,
                     id="gpuguard-with-verdict"),
        pytest.param(SEED_LINE.replace("manual", "gpuguard"), faults.Confirmation.EVIDENCE, None,
                     id="gpuguard"),
    ],
)
def test_lines_from_before_the_confirmation_column_read_as_confirmed(
    line: str, confirmation: faults.Confirmation, verdict: decisions.Verdict | None
) -> None:
    parsed = ledger.parse_line("gpu-node-b", line)
    assert (parsed.confirmation, parsed.verdict) == (confirmation, verdict)
    assert parsed.confirmed
    assert ledger.format_line(parsed) == f"{line} {confirmation}"  # rewritten with the column


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        pytest.param("2026-09-10 13:03:59 xid-79 0000:99:00.0 " + CARD + " manual", "expected",
                     id="space-in-time"),
        pytest.param("2026-13-10T13:03:59Z xid-79 0000:99:00.0 " + CARD + " manual", "bad time",
                     id="month-13"),
        pytest.param("2026-09-10T13:03:59Z xid79 0000:99:00.0 " + CARD + " manual", "bad fault",
                     id="xid-without-dash"),
        pytest.param("2026-09-10T13:03:59Z xid 0000:99:00.0 " + CARD + " manual", "without a code",
                     id="xid-without-code"),
        pytest.param("2026-09-10T13:03:59Z xid-79 0000:99:zz.0 " + CARD + " manual",
                     "not a PCI address", id="bad-pci"),
        pytest.param("2026-09-10T13:03:59Z xid-79 0000:99:00.0 GPU-1a2b manual", "bad GPU UUID",
                     id="truncated-uuid"),
        pytest.param("2026-09-10T13:03:59Z xid-79 0000:99:00.0 " + CARD + " gpu-node-guard",
                     "bad recorder", id="unknown-recorder"),
        pytest.param("2026-09-10T13:03:59Z xid-79 0000:99:00.0 " + CARD + " manual reboot",
                     "bad verdict", id="unknown-verdict"),
        pytest.param(SEED_LINE + " power-cycle observed extra", "expected",
                     id="too-many-columns"),
        pytest.param(SEED_LINE + " power-cycle maybe", "bad confirmation",
                     id="unknown-confirmation"),
        pytest.param(SEED_LINE + " observed power-cycle", "bad verdict",
                     id="confirmation-before-verdict"),
    ],
)
def test_malformed_line_says_what_is_wrong(line: str, complaint: str) -> None:
    with pytest.raises(InputError, match=complaint):
        ledger.parse_line("gpu-node-b", line)


def test_malformed_lines_are_reported_with_place_and_the_rest_kept() -> None:
    data = {
        "gpu-node-b": f"{SEED_LINE}\ngarbage here\n\n# a human note\n{SEED_LINE[:-6]}\n",
        "gpu-node-a": SEED_LINE.replace("0000:99", "0000:1b") + "\n",
    }
    read = ledger.parse_data("gpuguard-ledger-2026-09-0", data)
    assert [(e.node, e.pci) for e in read.entries] == [
        ("gpu-node-a", "0000:1b:00.0"), ("gpu-node-b", "0000:99:00.0"),
    ]
    assert len(read.malformed) == 2
    place = "ConfigMap gpuguard-ledger-2026-09-0 key gpu-node-b line 2:"
    assert read.malformed[0].startswith(place)
    assert "'garbage here'" in read.malformed[0]
    assert "line 5:" in read.malformed[1]


@pytest.mark.parametrize(
    ("item", "complaint"),
    [
        pytest.param(entry(at=datetime(2026, 9, 10)), "no timezone", id="naive-time"),
        pytest.param(entry(node="gpu node/b"), "cannot be a ConfigMap key", id="bad-node-key"),
        pytest.param(entry(xid=None), "kind xid without a code", id="xid-kind-without-code"),
    ],
)
def test_unwritable_entry_is_refused(item: faults.LedgerEntry, complaint: str) -> None:
    with pytest.raises(InputError, match=complaint):
        ledger.format_line(item)


def test_fill_stops_at_the_cap_and_measures_serialized_bytes() -> None:
    pending = [
        (f"gpu-node-{i % 7}", SEED_LINE.replace("13:03:59", f"13:{i // 60:02d}:{i % 60:02d}"))
        for i in range(400)
    ]
    filled = ledger.fill({}, pending, 4096)
    assert 0 < filled.added < 400
    assert filled.rest == pending[filled.added:]
    assert ledger.data_bytes(filled.data) <= 4096
    assert ledger.data_bytes(filled.data) == len(json.dumps(filled.data, separators=(",", ":")))


def test_fill_skips_lines_already_present() -> None:
    existing = {"gpu-node-b": SEED_LINE + "\n"}
    other = SEED_LINE.replace("13:03:59", "14:00:00")
    filled = ledger.fill(existing, [("gpu-node-b", SEED_LINE), ("gpu-node-b", other),
                                    ("gpu-node-b", other)], 4096)
    assert filled.added == 1
    assert filled.data == {"gpu-node-b": f"{SEED_LINE}\n{other}\n"}


@pytest.mark.parametrize(
    ("error", "attempt", "retry"),
    [
        pytest.param(ConflictError("stale resourceVersion"), 1, True, id="first-409-retries"),
        pytest.param(ConflictError("AlreadyExists"), 19, True, id="19th-409-still-retries"),
        pytest.param(ConflictError("stale"), 20, False, id="bounded-after-20-tries"),
        pytest.param(GpuguardError("API error 403"), 1, False, id="forbidden-never-retried"),
    ],
)
def test_retry_decision(error: Exception, attempt: int, retry: bool) -> None:
    decision = ledger.retry_decision(error, attempt, jitter=0.5)
    assert decision.retry is retry
    assert decision.why


def test_retry_delay_grows_is_jittered_and_capped() -> None:
    policy = ledger.RetryPolicy(attempts=50, base_s=0.01, cap_s=0.5)
    delays = [ledger.retry_decision(ConflictError("x"), n, jitter=1.0, policy=policy).delay_s
              for n in range(1, 10)]
    assert delays == sorted(delays)
    assert delays[0] == pytest.approx(0.02)
    assert delays[-1] == 0.5
    assert ledger.retry_decision(ConflictError("x"), 3, jitter=0.0, policy=policy).delay_s == 0


# --- audit lines ----------------------------------------------------------------------------

AUDIT_AT = datetime(2026, 10, 2, 8, 0, tzinfo=UTC)
NEW_LINE = f"2026-09-10T13:03:59Z xid-79 0000:99:00.0 {CARD} manual rma confirmed-by-person"


def audit(op: ledger.AuditOp = ledger.AuditOp.REMOVE, **changes: object) -> ledger.AuditRecord:
    fields: dict[str, object] = {
        "at": AUDIT_AT, "node": "gpu-node-b", "op": op, "target": SEED_LINE, "by": "kim",
        "why": "Xid 13 came from a user's kernel",
        "new": NEW_LINE if op is ledger.AuditOp.AMEND else None,
    }
    fields.update(changes)
    return ledger.AuditRecord(**fields)  # type: ignore[arg-type]


def test_audit_line_format_names_who_why_and_the_exact_target() -> None:
    line = ledger.format_audit(audit())
    assert line == (
        '2026-10-02T08:00:00Z audit {"op":"remove","target":"' + SEED_LINE + '","by":"kim",'
        '"why":"Xid 13 came from a user\'s kernel"}'
    )
    assert ledger.is_audit_line(line)
    assert not ledger.is_audit_line(SEED_LINE)


@pytest.mark.parametrize(
    "record",
    [
        pytest.param(audit(), id="remove"),
        pytest.param(audit(ledger.AuditOp.AMEND), id="amend-with-new-line"),
        pytest.param(audit(why="line one\nline two\u2028and 장애 원장"), id="why-with-newlines"),
    ],
)
def test_audit_round_trip_stays_one_line(record: ledger.AuditRecord) -> None:
    line = ledger.format_audit(record)
    assert line.splitlines() == [line]
    assert ledger.parse_audit_line("gpu-node-b", line) == record


@pytest.mark.parametrize(
    ("record", "complaint"),
    [
        pytest.param(audit(why="  "), "'why' is empty", id="no-why"),
        pytest.param(audit(by=""), "'by' is empty", id="no-who"),
        pytest.param(audit(why="x" * 1001), "over 1000", id="why-too-long"),
        pytest.param(audit(new=NEW_LINE), "only with amend", id="remove-with-new-line"),
        pytest.param(audit(ledger.AuditOp.AMEND, new=None), "only with amend",
                     id="amend-without-new-line"),
        pytest.param(audit(target="garbage"), "target 'garbage'", id="target-not-a-line"),
        pytest.param(audit(target=f"{SEED_LINE}\n{SEED_LINE}"), "one fault line",
                     id="two-targets"),
        pytest.param(audit(target=ledger.format_audit(audit())), "one fault line",
                     id="target-is-an-audit-line"),
        pytest.param(audit(at=datetime(2026, 10, 2)), "no timezone", id="naive-time"),
    ],
)
def test_unwritable_audit_is_refused(record: ledger.AuditRecord, complaint: str) -> None:
    with pytest.raises(InputError, match=complaint):
        ledger.format_audit(record)


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        pytest.param("2026-10-02T08:00:00Z audit remove it", "expected", id="not-an-object"),
        pytest.param("2026-10-02T08:00:00Z audit {oops}", "not JSON", id="bad-json"),
        pytest.param('2026-10-02T08:00:00Z audit {"op":"remove","when":"x"}', "keys",
                     id="unknown-key"),
        pytest.param('2026-10-02T08:00:00Z audit {"op":"delete","target":"' + SEED_LINE
                     + '","by":"kim","why":"x"}', "bad audit op", id="unknown-op"),
        pytest.param('2026-10-02T08:00:00Z audit {"op":"remove","target":"' + SEED_LINE
                     + '","by":7,"why":"x"}', "strings", id="who-not-a-string"),
    ],
)
def test_malformed_audit_line_says_what_is_wrong(line: str, complaint: str) -> None:
    with pytest.raises(InputError, match=complaint):
        ledger.parse_audit_line("gpu-node-b", line)


def entry_at(hour: int, **changes: object) -> faults.LedgerEntry:
    return entry(at=datetime(2026, 9, 10, hour, 0, tzinfo=UTC), **changes)


def stored(*lines: str) -> ledger.LedgerRead:
    return ledger.parse_data("gpuguard-ledger-2026-09-0", {"gpu-node-b": "\n".join(lines)})


def test_a_removed_line_drops_out_and_the_trail_keeps_it() -> None:
    wrong, right = entry_at(1, xid=13), entry_at(2)
    removal = audit(target=ledger.format_line(wrong))
    read = ledger.applied(stored(ledger.format_line(wrong), ledger.format_line(right),
                                 ledger.format_audit(removal)))
    assert read.entries == [right]
    assert read.removed == [wrong]
    assert read.audits == [removal]


def test_an_old_format_line_is_removed_by_its_exact_text() -> None:
    read = ledger.applied(stored(SEED_LINE, ledger.format_audit(audit())))
    assert read.entries == []
    assert read.removed == [entry()]


def test_amend_replaces_the_line_and_a_later_amend_can_put_it_back() -> None:
    old, new = entry_at(1), entry_at(1, verdict=decisions.Verdict.RMA)
    old_line, new_line = ledger.format_line(old), ledger.format_line(new)
    amend = audit(ledger.AuditOp.AMEND, target=old_line, new=new_line)
    back = audit(ledger.AuditOp.AMEND, at=AUDIT_AT + timedelta(hours=1), target=new_line,
                 new=old_line, why="the vendor withdrew the RMA")
    once = ledger.applied(stored(old_line, new_line, ledger.format_audit(amend)))
    assert (once.entries, once.removed) == ([new], [old])
    # stored out of time order: the audit trail is applied oldest first all the same
    twice = ledger.applied(stored(ledger.format_audit(back), old_line, new_line,
                                  ledger.format_audit(amend)))
    assert (twice.entries, twice.removed) == ([old], [new])
    assert [a.why for a in twice.audits] == [amend.why, back.why]


def test_an_audit_whose_target_is_not_stored_changes_nothing() -> None:
    kept = entry_at(2)
    read = ledger.applied(stored(ledger.format_line(kept), ledger.format_audit(audit())))
    assert read.entries == [kept]
    assert read.removed == []


def test_malformed_audit_lines_are_reported_with_their_place_and_change_nothing() -> None:
    read = ledger.applied(stored(SEED_LINE, '2026-10-02T08:00:00Z audit {"op":"remove"}'))
    assert read.entries == [entry()]
    (problem,) = read.malformed
    assert problem.startswith("ConfigMap gpuguard-ledger-2026-09-0 key gpu-node-b line 2:")


def test_line_id_is_the_same_for_the_old_and_the_new_format_and_selects_one_line() -> None:
    old = ledger.parse_line("gpu-node-b", SEED_LINE)
    new = ledger.parse_line("gpu-node-b", ledger.format_line(old))
    assert ledger.line_id(old) == ledger.line_id(new)
    assert len(ledger.line_id(old)) == 12
    other = entry_at(2)
    entries = [old, other, old]  # the same fault stored twice is one line to select
    assert ledger.matching(entries, ledger.Selector(line_id=ledger.line_id(old).upper())) == [old]
    by_place = ledger.Selector(node="gpu-node-b", at=other.at, xid=79,
                               kind=faults.FaultKind.XID)
    assert ledger.matching(entries, by_place) == [other]
    assert str(by_place) == "gpu-node-b 2026-09-10T02:00:00Z xid-79"
    wrong_fault = ledger.Selector(node="gpu-node-b", at=other.at, xid=48,
                                  kind=faults.FaultKind.XID)
    assert ledger.matching(entries, wrong_fault) == []
