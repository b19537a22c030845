"""Keeping isolated GPUs out (policy.gpu_enforcement): when the isolation Job runs again, how
its report becomes the node's marks, and when a GPU may return."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.model import annotation_keys, faults, fleet, gpu_isolation
from gpuguard.policy import gpu_enforcement as policy

NOW = datetime(2026, 8, 11, 9, 0, tzinfo=UTC)
CARD = "GPU-0a8e0faa"
PCI = "0000:2a:00.0"
PLUGIN = "nvidia-device-plugin-daemonset-x1"
Step = policy.Step


def entry() -> gpu_isolation.IsolatedGpu:
    return gpu_isolation.IsolatedGpu(CARD, PCI, "1", NOW - timedelta(hours=5), "xid-48",
                                     capacity=4)


def applied(boot: str = "boot-1", plugin: str = f"{PLUGIN}#0") -> gpu_isolation.IsolatedGpu:
    return entry().applied(boot, NOW - timedelta(hours=4), plugin, confirmed=True)


def node(
    *entries: gpu_isolation.IsolatedGpu,
    boot: str = "boot-1",
    capacity: int = 3,
    allocatable: int = 3,
    label: bool = True,
    marks: dict[str, str] | None = None,
    ready: bool = True,
) -> fleet.Node:
    annotations = {annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation(entries) or ""}
    held = entries or (entry(),)
    labels = {k: v for k, v in gpu_isolation.plugin_labels(held).items() if v} if label else {}
    return fleet.Node("gpu-node-a", boot, capacity, allocatable,
                      annotations=annotations | (marks or {}), labels=labels,
                      conditions={"Ready": "True" if ready else "False"})


def plugin_pod(restarts: int = 0) -> fleet.Pod:
    return fleet.Pod("gpu-operator", PLUGIN, "gpu-node-a", fleet.PodPhase.RUNNING, ready=True,
                     restarts=restarts)


PLANS = [
    pytest.param(node(entry(), capacity=4, label=False), [plugin_pod()], Step.APPLY,
                 "not applied yet", id="a-new-isolation-is-applied"),
    pytest.param(node(applied()), [plugin_pod()], Step.HELD, "verified", id="held-on-this-boot"),
    pytest.param(node(applied(), boot="boot-2"), [plugin_pod()], Step.APPLY, "booted again",
                 id="a-reboot-resets-compute-mode"),
    pytest.param(node(applied(), capacity=4, allocatable=4), [plugin_pod()], Step.APPLY,
                 "advertises 4 GPUs, expected 3", id="the-plugin-re-advertised-it"),
    pytest.param(node(applied()), [plugin_pod(restarts=1)], Step.APPLY, "device plugin restarted",
                 id="a-plugin-restart-or-gpu-reset"),
    pytest.param(node(applied(), label=False), [plugin_pod()], Step.APPLY, "lost its label",
                 id="the-label-was-removed"),
    pytest.param(node(applied(plugin="")), [plugin_pod(restarts=1)], Step.RECORD, "verified",
                 id="the-new-plugin-pod-is-recorded-once-it-runs"),
    pytest.param(node(applied(), ready=False), [], Step.WAIT, "not Ready",
                 id="a-node-not-ready-waits"),
]


@pytest.mark.parametrize(("the_node", "pods", "step", "why"), PLANS)
def test_plan(the_node: fleet.Node, pods: list[fleet.Pod], step: Step, why: str) -> None:
    plan = policy.plan(the_node, [], pods)
    assert plan is not None
    assert plan.step is step
    assert why in plan.detail


def test_each_re_application_is_a_new_job() -> None:
    first = policy.plan(node(entry(), capacity=4, label=False), [], [plugin_pod()])
    again = policy.plan(node(applied(), boot="boot-2"), [], [plugin_pod()])
    assert first is not None
    assert again is not None
    assert first.key != again.key


def report(mode: str = "PROHIBITED", excluded: bool = True, kernel: bool = True) -> str:
    gpu = {"uuid": CARD, "compute_mode": mode, "excluded": excluded, "kernel_fault": kernel,
           "error": ""}
    return json.dumps({"action": "apply", "ok": True, "gpus": [gpu]})


def test_a_held_report_marks_the_boot_the_fault_and_labels_the_node() -> None:
    the_node = node(entry(), capacity=4, label=False)
    plan = policy.plan(the_node, [], [plugin_pod()])
    assert plan is not None
    done = policy.after_apply(the_node, plan, report(), NOW)
    assert done.ok
    (written,) = fleet.Node("n", "", 0, 0, annotations={
        annotation_keys.GPU_ISOLATED: done.annotations[annotation_keys.GPU_ISOLATED] or ""}
    ).marks.gpus
    assert (written.applied_boot, written.confirmed, written.plugin) == ("boot-1", True, "")
    assert done.labels == {gpu_isolation.DEVICE_PLUGIN_LABEL: "excluding",
                           gpu_isolation.DEVICE_PLUGIN_VISIBLE_LABEL: "0-2-3"}


@pytest.mark.parametrize(
    "message",
    [report(mode="DEFAULT"), report(excluded=False), "not json", None],
    ids=["compute-mode-not-set", "not-excluded", "garbage", "no-message"],
)
def test_a_report_that_does_not_show_the_gpu_held_fails(message: str | None) -> None:
    the_node = node(entry(), capacity=4, label=False)
    plan = policy.plan(the_node, [], [plugin_pod()])
    assert plan is not None
    assert not policy.after_apply(the_node, plan, message, NOW).ok


def fault_line(days_ago: int) -> faults.LedgerEntry:
    return faults.LedgerEntry(NOW - timedelta(days=days_ago), "gpu-node-a", 48, PCI, CARD,
                              faults.Recorder.GPUGUARD,
                              confirmation=faults.Confirmation.DEVICE_PLUGIN)


RETURNS = [
    pytest.param(CARD, [fault_line(3)], Step.RETURN, id="one-fault-returns"),
    pytest.param(CARD, [fault_line(30), fault_line(20), fault_line(3)], Step.HELD,
                 id="a-card-to-replace-is-refused"),
    pytest.param(f"replaced:{CARD}", [fault_line(30), fault_line(20), fault_line(3)],
                 Step.RETURN, id="a-replaced-card-leaves-the-list"),
    pytest.param(CARD, None, Step.HELD, id="an-unreadable-ledger-refuses"),
]


@pytest.mark.parametrize(("asked", "ledger", "step"), RETURNS)
def test_a_return_goes_through_the_card_history(
    asked: str, ledger: list[faults.LedgerEntry] | None, step: Step
) -> None:
    the_node = node(applied(), marks={annotation_keys.GPU_RETURN: asked})
    plan = policy.plan(the_node, ledger, [plugin_pod()])
    assert plan is not None
    assert plan.step is step
    assert (plan.step is Step.HELD) == (CARD in plan.refused)


def undo_report(remap_pending: bool | None = False) -> str:
    gpu = {"uuid": CARD, "compute_mode": "DEFAULT", "excluded": False,
           "remap_pending": remap_pending}
    return json.dumps({"gpus": [gpu]})


def burnin_report(passed: bool) -> str:
    check = {"check": "throughput", "status": "PASS" if passed else "FAIL",
             "evidence": "GPU 0: 51% of expected"}
    return json.dumps({"passed": passed, "checks": [check]})


def with_marks(the_node: fleet.Node, done: policy.Applied) -> fleet.Node:
    annotations = {k: v for k, v in (the_node.annotations | done.annotations).items() if v}
    labels = {k: v for k, v in (the_node.labels | done.labels).items() if v}
    return fleet.Node(the_node.name, the_node.boot_id, the_node.gpu_capacity,
                      the_node.gpu_allocatable, annotations=annotations, labels=labels,
                      conditions=the_node.conditions)


def returning_node() -> fleet.Node:
    """Undo done: compute mode Default, the card's burn-in next."""
    the_node = node(applied(), marks={annotation_keys.GPU_RETURN: CARD})
    plan = policy.plan(the_node, [fault_line(3)], [plugin_pod()])
    assert plan is not None
    assert plan.step is Step.RETURN
    done = policy.after_return(the_node, plan, undo_report())
    assert done.reason is policy.Reason.GPU_RETURN_CHECKED
    assert done.labels == {}  # still not advertised during its burn-in
    return with_marks(the_node, done)


def test_a_returning_gpu_is_burnt_in_alone_and_then_every_mark_goes() -> None:
    the_node = returning_node()
    plan = policy.plan(the_node, [fault_line(3)], [plugin_pod()])
    assert plan is not None
    assert (plan.step, plan.uuids) == (Step.BURNIN, (CARD,))
    done = policy.after_burnin(the_node, plan, True, burnin_report(passed=True))
    assert done.reason is policy.Reason.GPU_RETURNED
    assert done.annotations == {annotation_keys.GPU_ISOLATED: None,
                                annotation_keys.GPU_RETURN: None,
                                annotation_keys.GPU_REQUEST: None}
    assert done.labels == {gpu_isolation.DEVICE_PLUGIN_LABEL: None,
                           gpu_isolation.DEVICE_PLUGIN_VISIBLE_LABEL: None}


@pytest.mark.parametrize(("succeeded", "message"), [
    (False, burnin_report(passed=False)), (True, burnin_report(passed=False)), (False, None)])
def test_a_failed_burnin_holds_the_gpu_and_applies_it_again(
    succeeded: bool, message: str | None
) -> None:
    the_node = returning_node()
    plan = policy.plan(the_node, [fault_line(3)], [plugin_pod()])
    assert plan is not None
    done = policy.after_burnin(the_node, plan, succeeded, message)
    assert done.reason is policy.Reason.GPU_RETURN_FAILED
    assert done.annotations[annotation_keys.GPU_RETURN] is None  # asked again after a repair
    held = with_marks(the_node, done)
    (card,) = held.marks.gpus
    assert not card.returning
    again = policy.plan(held, [fault_line(3)], [plugin_pod()])
    assert again is not None
    assert again.step is Step.APPLY  # compute mode PROHIBITED again


def test_a_pending_or_failed_row_remap_refuses_the_return() -> None:
    the_node = node(applied(), marks={annotation_keys.GPU_RETURN: CARD})
    plan = policy.plan(the_node, [fault_line(3)], [plugin_pod()])
    assert plan is not None
    done = policy.after_return(the_node, plan, undo_report(remap_pending=True))
    assert done.reason is policy.Reason.GPU_RETURN_FAILED
    assert "row remap" in done.detail
    again = policy.plan(with_marks(the_node, done), [fault_line(3)], [plugin_pod()])
    assert again is not None
    assert again.step is Step.APPLY


def test_a_second_return_after_a_failed_one_runs_a_new_undo_job() -> None:
    the_node = node(applied(), marks={annotation_keys.GPU_RETURN: CARD})
    first = policy.plan(the_node, [fault_line(3)], [plugin_pod()])
    reapplied = entry().applied("boot-1", NOW, f"{PLUGIN}#0", confirmed=True)
    later = node(reapplied, marks={annotation_keys.GPU_RETURN: CARD})
    second = policy.plan(later, [fault_line(3)], [plugin_pod()])
    assert first is not None
    assert second is not None
    assert first.key != second.key


def test_a_replaced_card_leaves_the_list_without_a_burnin() -> None:
    the_node = node(applied(), marks={annotation_keys.GPU_RETURN: f"replaced:{CARD}"})
    plan = policy.plan(the_node, [fault_line(30), fault_line(20), fault_line(3)], [plugin_pod()])
    assert plan is not None
    absent = json.dumps({"gpus": [{"uuid": CARD, "compute_mode": "absent", "excluded": False}]})
    done = policy.after_return(the_node, plan, absent)
    assert done.reason is policy.Reason.GPU_RETURNED
    assert done.annotations[annotation_keys.GPU_ISOLATED] is None


def test_a_card_waiting_past_the_rma_deadline_is_overdue() -> None:
    the_node = node(applied())
    assert policy.overdue(the_node, NOW, timedelta(hours=6)) == ()
    (late,) = policy.overdue(the_node, NOW, timedelta(hours=4))
    assert late.uuid == CARD
