"""The ledger's line format (the lifecycle report's [docs/design.md#incidents] columns), strict
parsing that reports and skips bad lines, segment filling under the size cap, and the retry policy
for 409s."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpuguard.actuators import ledger
from gpuguard.errors import ConflictError, GpuguardError, InputError
from gpuguard.model import decisions, faults

CARD = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
SEED_LINE = f"2026-09-10T13:03:59Z xid-79 0000:99:00.0 {CARD} manual"


def entry(**changes: object) -> faults.LedgerEntry:
    fields: dict[str, object] = {
        "at": datetime(2026, 9, 10, 13, 3, 59, tzinfo=UTC),
        "node": "gpu-node-b",
        "xid": 79,
        "pci": "0000:99:00.0",
        "uuid": CARD,
        "recorder": faults.Recorder.MANUAL,
    }
    fields.update(changes)
    return faults.LedgerEntry(**fields)  # type: ignore[arg-type]


def test_seed_line_parses_to_the_seed_fault() -> None:
    assert ledger.parse_line("gpu-node-b", SEED_LINE) == entry()


@pytest.mark.parametrize(
    ("item", "line"),
    [
        pytest.param(entry(), SEED_LINE, id="seed-manual-xid79"),
        pytest.param(
            entry(recorder=faults.Recorder.GPUGUARD, verdict=decisions.Verdict.POWER_CYCLE),
            f"2026-09-10T13:03:59Z xid-79 0000:99:00.0 {CARD} gpuguard power-cycle",
            id="guard-line-with-verdict",
        ),
        pytest.param(
            entry(xid=None, kind=faults.FaultKind.FALLEN_OFF_BUS, uuid=None),
            "2026-09-10T13:03:59Z fallen_off_bus 0000:99:00.0 - manual",
            id="gpu-lost-without-xid-unknown-card",
        ),
        pytest.param(
            entry(at=datetime(2026, 9, 10, 22, 3, 59, tzinfo=timezone(timedelta(hours=9))),
                  pci=None),
            f"2026-09-10T13:03:59Z xid-79 - {CARD} manual",
            id="kst-time-written-in-utc",
        ),
    ],
)
def test_format_and_parse_round_trip(item: faults.LedgerEntry, line: str) -> None:
    assert ledger.format_line(item) == line
    assert ledger.parse_line(item.node, line) == item


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
        pytest.param(SEED_LINE + " power-cycle extra", "expected", id="too-many-columns"),
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
