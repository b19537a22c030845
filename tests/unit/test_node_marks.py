"""`NodeMarks`: every gpuguard mark of a node parsed once, bad marks read the way the readers
always read them, and one answer to "whose isolation is this" — forged marks are FOREIGN."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest

from gpuguard.errors import InputError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions, fleet, remediation
from gpuguard.model.node_marks import Isolation, NodeMarks

NOW = datetime(2026, 9, 21, 6, 0, tzinfo=UTC)
STAMP = "2026-09-21T06:00:00Z"
OURS = frozenset({keys.FIELD_MANAGER})


def gpu_entry(uuid: str = "GPU-aaaa", **extra: object) -> dict[str, object]:
    entry = {"uuid": uuid, "pci": "0000:07:00.0", "index": "3", "at": STAMP, "fault": "xid-48"}
    return entry | extra


def test_plain_marks_are_read() -> None:
    marks = NodeMarks.parse({
        keys.ISOLATED_AT: STAMP, keys.REASON: "xid-79", keys.BOOT_ID: "boot-1",
        keys.VERDICT: "power-cycle", keys.GPU_UUID: "GPU-aaaa", keys.GPU_PCI: "0000:07:00.0",
        keys.HOLD: "waiting for RMA", keys.RESET_DONE: STAMP, keys.INSPECTED: STAMP,
        keys.BURNIN_JOB_UID: "burnin-x=uid-1", keys.GPU_RETURN: " GPU-a, ,GPU-b ",
    }, OURS)  # fmt: skip
    assert (marks.isolated_at, marks.reason, marks.boot_id, marks.verdict) == (
        STAMP, "xid-79", "boot-1", "power-cycle")
    assert (marks.gpu_uuid, marks.gpu_pci, marks.hold) == (
        "GPU-aaaa", "0000:07:00.0", "waiting for RMA")
    assert (marks.reset_done, marks.inspected, marks.burnin_job_uid) == (
        STAMP, STAMP, "burnin-x=uid-1")
    assert marks.gpu_return == frozenset({"GPU-a", "GPU-b"})
    assert not marks.failed_return
    assert marks.isolation is Isolation.GPUGUARD


def test_no_marks() -> None:
    marks = NodeMarks.parse({"other.io/thing": "x"})
    assert marks == NodeMarks()
    assert marks.isolation is Isolation.NONE
    assert (marks.withheld, marks.gpus, marks.gpu_return, marks.remediation) == (
        None, (), frozenset(), None)


def test_withheld_mark_is_read_and_a_bad_one_is_none() -> None:
    good = json.dumps({"reason": "breaker-tripped", "since": STAMP, "fault": "xid-79", "gpu": "3"})
    mark = NodeMarks.parse({keys.WITHHELD: good}).withheld
    assert mark is not None
    assert (mark.reason, mark.since, mark.fault, mark.gpu) == (
        decisions.Reason.BREAKER_TRIPPED, NOW, "xid-79", "3")
    assert mark.tripped
    for bad in ("{", "[]", json.dumps({"reason": "nope", "since": STAMP, "fault": "x"}),
                json.dumps({"reason": "breaker-tripped", "since": "yesterday", "fault": "x"})):
        assert NodeMarks.parse({keys.WITHHELD: bad}).withheld is None, bad


def test_gpu_isolation_skips_bad_entries_only() -> None:
    text = json.dumps([gpu_entry(), {"uuid": "GPU-bbbb"}, "junk",
                       gpu_entry("GPU-cccc", mechanism="teleport"), gpu_entry("GPU-dddd")])
    marks = NodeMarks.parse({keys.GPU_ISOLATED: text})
    assert [e.uuid for e in marks.gpus] == ["GPU-aaaa", "GPU-dddd"]
    assert marks.gpus[0].at == NOW
    for bad in ("", "{", json.dumps({"uuid": "GPU-aaaa"})):
        assert NodeMarks.parse({keys.GPU_ISOLATED: bad}).gpus == ()


def test_a_failed_return_or_burnin_is_seen() -> None:
    assert NodeMarks.parse({keys.RETURN_FAILED: "burn-in failed"}).failed_return
    assert NodeMarks.parse({keys.BURNIN_FAILED: "k"}).failed_return


def test_remediation_mark_and_a_malformed_one_raises_where_asked() -> None:
    mark = remediation.Mark(remediation.Action.POWER_CYCLE, remediation.Result.DONE, NOW,
                            STAMP, "power cycle requested")  # fmt: skip
    assert NodeMarks.parse({keys.REMEDIATION: mark.render()}).remediation == mark
    broken = NodeMarks.parse({keys.REMEDIATION: "{not json"})  # parsing itself never fails
    with pytest.raises(InputError, match=keys.REMEDIATION) as first:
        _ = broken.remediation
    with pytest.raises(InputError, match=keys.REMEDIATION) as again:
        _ = broken.remediation
    assert first.value is not again.value  # each read raises afresh, chained to the cause
    assert isinstance(again.value.__cause__, ValueError)


@pytest.mark.parametrize(
    ("writers", "isolation", "foreign"),
    [
        pytest.param(OURS, Isolation.GPUGUARD, None, id="written-by-gpuguard"),
        pytest.param(OURS | {"kubectl"}, Isolation.GPUGUARD, None, id="gpuguard-among-writers"),
        pytest.param(None, Isolation.GPUGUARD, None, id="writers-not-read"),
        pytest.param(frozenset({"kubectl-annotate", "helm"}), Isolation.FOREIGN,
                     "helm, kubectl-annotate", id="forged-by-a-person"),
        pytest.param(frozenset(), Isolation.FOREIGN, "no recorded field manager",
                     id="forged-no-field-manager"),
    ],
)
def test_whose_isolation(
    writers: frozenset[str] | None, isolation: Isolation, foreign: str | None
) -> None:
    marks = NodeMarks.parse({keys.ISOLATED_AT: STAMP}, writers)
    assert (marks.isolation, marks.foreign_writer) == (isolation, foreign)


def test_writers_without_a_mark_are_no_isolation() -> None:
    marks = NodeMarks.parse({keys.REASON: "xid-79"}, frozenset({"kubectl"}))
    assert (marks.isolation, marks.foreign_writer) == (Isolation.NONE, None)


def test_forged_marks_on_a_cordoned_node_are_not_gpuguards_isolation() -> None:
    ours = fleet.Node("n1", "b", 8, 8, unschedulable=True,
                      annotations={keys.ISOLATED_AT: STAMP}, isolation_writers=OURS)  # fmt: skip
    forged = dataclasses.replace(ours, isolation_writers=frozenset({"kubectl-annotate"}))
    assert ours.isolated_by_gpuguard
    assert not forged.isolated_by_gpuguard
    assert forged.marks.isolation is Isolation.FOREIGN
    assert not dataclasses.replace(ours, unschedulable=False).isolated_by_gpuguard


def test_the_node_parses_once_and_a_new_node_parses_again() -> None:
    node = fleet.Node("n1", "b", 8, 8, annotations={keys.ISOLATED_AT: STAMP})
    assert node.marks is node.marks
    assert node.marks.isolated_at == STAMP
    changed = dataclasses.replace(node, annotations={keys.REASON: "xid-79"})
    assert changed.marks.isolated_at is None
    assert changed.marks.reason == "xid-79"
    assert node == dataclasses.replace(node)  # the cache is no part of the node's value
    assert "marks" not in repr(node)
