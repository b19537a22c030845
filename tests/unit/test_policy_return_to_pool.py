"""The return-to-pool policy, table-driven with the lifecycle report's [docs/design.md#incidents]
9/22 return and its known gaps."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from gpuguard.cli import return_checklist
from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions, faults, fleet, settings
from gpuguard.model import return_to_pool as model
from gpuguard.policy import return_to_pool
from tests.return_builders import (
    BOOT_AT_ISOLATION,
    GUARD,
    ISOLATED_AT,
    NOW,
    XID_79_AGAIN,
    burnin,
    facts,
    marks,
    node,
    pod,
    stamp,
    system_pods,
)

Status = decisions.CheckStatus
Step = model.ReturnStep
Condition = model.ReturnCondition

CASES = [
    pytest.param(
        node(),
        facts(),
        Step.UNCORDON,
        None,
        id="9/22-flow-power-cycle-boot-changed-capacity-back-burnin-pass-returns",
    ),
    pytest.param(
        node(),
        facts(burnin=None),
        Step.START_BURN_IN,
        None,
        id="9/22-16:25-conditions-met-starts-burn-in",
    ),
    pytest.param(
        node(),
        facts(burnin=burnin(model.BurninOutcome.RUNNING)),
        Step.BURN_IN_RUNNING,
        None,
        id="9/22-16:26-burn-in-running-waits-for-it",
    ),
    pytest.param(
        node(marks(**{keys.HOLD: "infra: card needs inspection (ticket INFRA-2231)"})),
        facts(),
        Step.HOLD,
        Condition.NO_HOLD,
        id="same-with-hold-annotation-stays",
    ),
    pytest.param(
        node(),
        facts(card_faults=2),
        Step.HOLD,
        Condition.CARD_HISTORY,
        id="9/22-card-second-xid79-in-11-days-held-for-inspection",
    ),
    pytest.param(
        node(),
        facts(card_faults=3),
        Step.HOLD,
        Condition.CARD_HISTORY,
        id="same-card-third-fault-stays-held",
    ),
    pytest.param(
        node(marks(**{keys.INSPECTED: stamp(ISOLATED_AT + timedelta(hours=6))})),
        facts(card_faults=2),
        Step.UNCORDON,
        None,
        id="card-with-history-inspected-after-this-fault-returns",
    ),
    pytest.param(
        node(marks(**{keys.INSPECTED: stamp(ISOLATED_AT - timedelta(days=11))})),
        facts(card_faults=2),
        Step.HOLD,
        Condition.CARD_HISTORY,
        id="inspection-of-the-first-fault-does-not-clear-the-second",
    ),
    pytest.param(
        node(marks("xid-94"), boot=BOOT_AT_ISOLATION),
        facts(burnin=burnin(boot=BOOT_AT_ISOLATION)),
        Step.HOLD,
        Condition.REBOOTED_OR_RESET,
        id="reset-class-without-reset-done-stays-although-operands-restarted",
    ),
    pytest.param(
        node(
            marks("xid-94", **{keys.RESET_DONE: stamp(ISOLATED_AT - timedelta(days=3))}),
            boot=BOOT_AT_ISOLATION,
        ),
        facts(burnin=burnin(boot=BOOT_AT_ISOLATION)),
        Step.HOLD,
        Condition.REBOOTED_OR_RESET,
        id="reset-done-older-than-isolation-stays",
    ),
    pytest.param(
        node(
            marks("xid-119", **{keys.RESET_DONE: stamp(ISOLATED_AT + timedelta(minutes=4))}),
            boot=BOOT_AT_ISOLATION,
        ),
        facts(burnin=burnin(boot=BOOT_AT_ISOLATION)),
        Step.UNCORDON,
        None,
        id="9/30-drill-reset-class-with-reset-done-returns-without-reboot",
    ),
    pytest.param(
        node(marks("xid-119")),
        facts(),
        Step.UNCORDON,
        None,
        id="reset-class-power-cycled-instead-the-reboot-is-the-reset",
    ),
    pytest.param(
        node(
            marks(
                "xid-95",
                **{
                    keys.VERDICT: "power-cycle",
                    keys.RESET_DONE: stamp(ISOLATED_AT + timedelta(minutes=4)),
                },
            ),
            boot=BOOT_AT_ISOLATION,
        ),
        facts(burnin=burnin(boot=BOOT_AT_ISOLATION)),
        Step.HOLD,
        Condition.REBOOTED_OR_RESET,
        id="xid95-config-space-all-ff-verdict-power-cycle-reset-is-not-enough",
    ),
    pytest.param(
        node(boot=BOOT_AT_ISOLATION),
        facts(burnin=burnin(boot=BOOT_AT_ISOLATION)),
        Step.HOLD,
        Condition.REBOOTED_OR_RESET,
        id="xid79-not-power-cycled-yet-stays",
    ),
    pytest.param(
        node(capacity=7, allocatable=7),
        facts(),
        Step.HOLD,
        Condition.GPUS_BACK,
        id="capacity-7-of-7-after-card-vanished-for-good-does-not-return",
    ),
    pytest.param(
        node(),
        facts(hardware_xids_since_boot=(XID_79_AGAIN,)),
        Step.HOLD,
        Condition.NO_HARDWARE_XID,
        id="xid79-again-after-boot-stays",
    ),
    pytest.param(
        node(),
        facts(pods=(*system_pods(), pod("train-llm-0", "research", gpus=8))),
        Step.HOLD,
        Condition.NO_GPU_PODS,
        id="running-pod-holds-gpus-stays",
    ),
    pytest.param(
        node(),
        facts(
            pods=(*system_pods(), pod("burnin-gpu-node-b-x7", "gpuguard", gpus=8)),
            burnin=burnin(model.BurninOutcome.RUNNING),
        ),
        Step.BURN_IN_RUNNING,
        None,
        id="gpuguards-own-burn-in-pod-does-not-block-itself",
    ),
    pytest.param(
        node(),
        facts(burnin=burnin(model.BurninOutcome.FAILED, failed_check="throughput-ratio 0.71")),
        Step.STAY_ISOLATED,
        None,
        id="burnin-failed-stays-isolated-with-failed-check",
    ),
    pytest.param(
        node(),
        facts(burnin=burnin(boot=BOOT_AT_ISOLATION)),
        Step.START_BURN_IN,
        None,
        id="burn-in-of-an-earlier-boot-does-not-count",
    ),
    pytest.param(
        node(cordoned=False),
        facts(burnin=None),
        Step.CLEAN_ANNOTATIONS,
        None,
        id="human-uncordoned-first-cleans-annotations-and-records-skip",
    ),
    pytest.param(
        node({keys.HOLD: "do not uncordon"}),
        facts(),
        Step.NONE,
        None,
        id="human-removed-annotations-becomes-human-cordon-untouched",
    ),
    pytest.param(
        node({}, cordoned=False),
        facts(),
        Step.NONE,
        None,
        id="serving-node-never-isolated-untouched",
    ),
    pytest.param(
        node(),
        facts(pods=system_pods(kube_proxy_ready=False)),
        Step.HOLD,
        Condition.SERVICE_NETWORK,
        id="kube-proxy-not-ready-holds",
    ),
    pytest.param(
        node(),
        facts(pods=(pod("nvidia-device-plugin-daemonset-x8c2v", "gpu-operator"),)),
        Step.WAIT,
        Condition.SERVICE_NETWORK,
        id="9/22-ip_vs-missing-no-kube-proxy-or-cni-pod-yet-waits",
    ),
    pytest.param(
        node(),
        facts(pcie_links=(model.PcieLink("4", 8, 16, 4, 4, under_load=True),)),
        Step.HOLD,
        Condition.PCIE_LINK,
        id="pcie-link-degraded-holds",
    ),
    pytest.param(
        node(),
        facts(row_remap_pending={"3": 0.0, "4": 1.0}),
        Step.HOLD,
        Condition.ROW_REMAP_PENDING,
        id="row-remap-pending-holds",
    ),
    pytest.param(
        node(),
        facts(row_remap_pending={}, conformance={}, pcie_links=()),
        Step.UNCORDON,
        None,
        id="no-ecc-no-agent-no-pcie-metrics-not-required-returns",
    ),
    pytest.param(
        node(),
        facts(conformance={"ipvs-persist": Status.FAIL, "nvidia-match": Status.PASS}),
        Step.HOLD,
        Condition.HOST_CONFORMANCE,
        id="10/14-ipvs-persist-fail-holds",
    ),
]


@pytest.mark.parametrize(("subject", "given", "step", "blocking"), CASES)
def test_return_step_and_blocking_condition(
    subject: fleet.Node,
    given: model.ReturnFacts,
    step: model.ReturnStep,
    blocking: model.ReturnCondition | None,
) -> None:
    decision = return_to_pool.decide(subject, given, GUARD, NOW)

    assert decision.step is step
    assert (decision.blocking.name if decision.blocking else None) == blocking


@pytest.mark.parametrize(("subject", "given", "step", "blocking"), CASES)
def test_checklist_always_lists_every_condition_in_order(
    subject: fleet.Node,
    given: model.ReturnFacts,
    step: model.ReturnStep,
    blocking: model.ReturnCondition | None,
) -> None:
    decision = return_to_pool.decide(subject, given, GUARD, NOW)

    assert [check.name for check in decision.checks] == list(model.ReturnCondition)
    assert all(check.summary for check in decision.checks)


MISSING = [
    pytest.param({"pods": None}, Condition.NO_GPU_PODS, id="pods-unreadable"),
    pytest.param({"hardware_xids_since_boot": None}, Condition.NO_HARDWARE_XID, id="xids"),
    pytest.param({"card_faults": None}, Condition.CARD_HISTORY, id="ledger-unreadable"),
    pytest.param({"row_remap_pending": None}, Condition.ROW_REMAP_PENDING, id="row-remap"),
    pytest.param({"conformance": None}, Condition.HOST_CONFORMANCE, id="agent-unreadable"),
    pytest.param({"pcie_links": None}, Condition.PCIE_LINK, id="pcie-unreadable"),
    pytest.param(
        {"conformance": {"ipvs-loaded": Status.UNKNOWN}},
        Condition.HOST_CONFORMANCE,
        id="agent-check-unknown",
    ),
]


@pytest.mark.parametrize(("missing", "condition"), MISSING)
def test_missing_data_waits_never_returns(
    missing: dict[str, object], condition: model.ReturnCondition
) -> None:
    decision = return_to_pool.decide(node(), facts(**missing), GUARD, NOW)

    assert decision.step is Step.WAIT
    assert decision.action is None
    assert decision.blocking is not None
    assert decision.blocking.name is condition
    assert decision.blocking.status is Status.UNKNOWN


MALFORMED = [
    pytest.param(node(marks(**{keys.ISOLATED_AT: "yesterday"})), keys.ISOLATED_AT, id="at"),
    pytest.param(node(marks(**{keys.GPU_CAPACITY: "eight"})), keys.GPU_CAPACITY, id="capacity"),
    pytest.param(
        node(marks("xid-95", **{keys.RESET_DONE: "done!"}), boot=BOOT_AT_ISOLATION),
        keys.RESET_DONE,
        id="reset-done",
    ),
    pytest.param(
        node(marks("xid-95", **{keys.RESET_DONE: "2026-09-22T10:00:00"}), boot=BOOT_AT_ISOLATION),
        keys.RESET_DONE,
        id="reset-done-without-zone",
    ),
]


@pytest.mark.parametrize(("subject", "annotation"), MALFORMED)
def test_malformed_annotation_waits_and_names_it(subject: fleet.Node, annotation: str) -> None:
    decision = return_to_pool.decide(subject, facts(), GUARD, NOW)

    assert decision.step is Step.WAIT
    assert decision.blocking is not None
    assert annotation in decision.blocking.summary


def test_returning_uncordons_and_removes_gpuguards_marks_but_never_a_hold() -> None:
    subject = node(marks(**{keys.RETURN_FAILED: "gpu-count 7/8"}))

    decision = return_to_pool.decide(subject, facts(), GUARD, NOW)

    assert decision.action is not None
    assert decision.action.kind is decisions.ActionKind.UNCORDON
    assert decision.reason is decisions.Reason.BURN_IN_PASSED
    assert set(decision.remove_annotations) == set(subject.annotations)
    assert keys.HOLD not in return_to_pool.OWN_KEYS + return_to_pool.CONSUMED_HUMAN_KEYS


def test_burnin_failure_annotates_the_failed_check_and_its_key_once() -> None:
    failed = facts(burnin=burnin(model.BurninOutcome.FAILED, failed_check="gpu-count 7/8"))

    first = return_to_pool.decide(node(), failed, GUARD, NOW)
    assert first.action is not None
    marked = node(marks(**first.action.annotations))
    again = return_to_pool.decide(marked, failed, GUARD, NOW)

    assert first.action.kind is decisions.ActionKind.ANNOTATE
    assert first.action.annotations == {
        keys.RETURN_FAILED: "gpu-count 7/8",
        keys.BURNIN_FAILED: return_to_pool.burnin_key(node(), model.BurninMode.MATMUL),
    }
    assert first.record is not None
    assert first.record.kind is faults.FaultKind.BURNIN_FAILED
    assert first.record.uuid == node().annotations[keys.GPU_UUID]
    assert again.step is Step.STAY_ISOLATED
    assert (again.action, again.record) == (None, None)


def test_a_recorded_burnin_failure_stands_after_its_job_is_gone_until_a_new_boot_or_mark() -> None:
    failed = facts(burnin=burnin(model.BurninOutcome.FAILED, failed_check="gpu-count 7/8"))
    first = return_to_pool.decide(node(), failed, GUARD, NOW)
    assert first.action is not None
    marked = marks(**first.action.annotations)

    job_deleted = return_to_pool.decide(node(marked), facts(burnin=None), GUARD, NOW)
    inspected = node(marked | {keys.INSPECTED: "2026-09-21T07:00:00Z"})
    after_inspection = return_to_pool.decide(inspected, facts(burnin=None), GUARD, NOW)

    assert job_deleted.step is Step.STAY_ISOLATED
    assert job_deleted.action is None
    assert "gpu-count 7/8" in job_deleted.detail
    assert after_inspection.step is Step.START_BURN_IN


def test_human_uncordon_cleans_only_gpuguards_marks_and_records_the_skip() -> None:
    subject = node(marks(**{keys.HOLD: "keep for RMA"}), cordoned=False)

    decision = return_to_pool.decide(subject, facts(burnin=None), GUARD, NOW)

    assert decision.action is not None
    assert decision.action.kind is decisions.ActionKind.CLEAN_ANNOTATIONS
    assert "burn-in skipped: uncordoned by a human" in decision.action.detail
    assert keys.ISOLATED_AT in decision.remove_annotations
    assert keys.HOLD not in decision.remove_annotations


def test_human_cordon_is_never_written() -> None:
    decision = return_to_pool.decide(node({}), facts(), GUARD, NOW)

    assert decision.reason is decisions.Reason.HUMAN_CORDON
    assert decision.action is None
    assert decision.remove_annotations == ()


def test_hold_shows_the_humans_reason() -> None:
    text = "infra: card needs inspection (ticket INFRA-2231)"

    decision = return_to_pool.decide(node(marks(**{keys.HOLD: text})), facts(), GUARD, NOW)

    assert decision.blocking is not None
    assert text in decision.blocking.summary


def test_reset_class_operand_restart_names_the_missing_reset_done() -> None:
    subject = node(marks("xid-48"), boot=BOOT_AT_ISOLATION)
    decision = return_to_pool.decide(subject, facts(), GUARD, NOW)

    assert decision.blocking is not None
    assert keys.RESET_DONE in decision.blocking.summary


MEMORY_CLASS = [
    pytest.param("xid-48", model.BurninMode.MATMUL_AND_MEMTEST, id="xid48-dbe-memtest"),
    pytest.param("xid-64", model.BurninMode.MATMUL_AND_MEMTEST, id="xid64-remap-fail-memtest"),
    pytest.param("xid-140", model.BurninMode.MATMUL_AND_MEMTEST, id="xid140-ecc-memtest"),
    pytest.param("xid-79", model.BurninMode.MATMUL, id="xid79-bus-matmul-only"),
    pytest.param("fallen-off-bus", model.BurninMode.MATMUL, id="fallen-off-bus-matmul-only"),
    pytest.param("who-knows", model.BurninMode.MATMUL_AND_MEMTEST, id="unknown-fault-memtest"),
]


@pytest.mark.parametrize(("reason", "mode"), MEMORY_CLASS)
def test_memory_class_fault_asks_for_memtest(reason: str, mode: model.BurninMode) -> None:
    decision = return_to_pool.decide(node(marks(reason)), facts(burnin=None), GUARD, NOW)

    assert decision.step is Step.START_BURN_IN
    assert decision.burnin_mode is mode
    assert decision.action is not None
    assert decision.action.kind is decisions.ActionKind.START_BURNIN_JOB


def test_matmul_only_pass_does_not_return_a_memory_class_fault() -> None:
    decision = return_to_pool.decide(node(marks("xid-48")), facts(), GUARD, NOW)

    assert decision.step is Step.START_BURN_IN
    assert decision.burnin_mode is model.BurninMode.MATMUL_AND_MEMTEST


def test_max_card_faults_is_configurable() -> None:
    lenient = settings.GuardSettings.load(None, {"GPUGUARD_RETURN_TO_POOL__MAX_CARD_FAULTS": "4"})

    decision = return_to_pool.decide(node(), facts(card_faults=3), lenient, NOW)

    assert decision.step is Step.UNCORDON


@pytest.mark.parametrize(
    ("field", "empty", "condition"),
    [
        pytest.param(
            "require_conformance",
            {"conformance": {}},
            Condition.HOST_CONFORMANCE,
            id="no-agent-required",
        ),
        pytest.param(
            "require_row_remap",
            {"row_remap_pending": {}},
            Condition.ROW_REMAP_PENDING,
            id="row-remap-required",
        ),
    ],
)
def test_required_report_absent_waits(
    field: str, empty: dict[str, object], condition: model.ReturnCondition
) -> None:
    strict = GUARD.model_copy(update={"return_to_pool": settings.ReturnSettings(**{field: True})})

    decision = return_to_pool.decide(node(), facts(**empty), strict, NOW)

    assert decision.step is Step.WAIT
    assert decision.blocking is not None
    assert decision.blocking.name is condition


def test_idle_pcie_generation_is_not_a_degraded_link() -> None:
    idle = facts(pcie_links=(model.PcieLink("4", 16, 16, 1, 4, under_load=False),))
    loaded = facts(pcie_links=(model.PcieLink("4", 16, 16, 3, 4, under_load=True),))

    assert return_to_pool.decide(node(), idle, GUARD, NOW).step is Step.UNCORDON
    assert return_to_pool.decide(node(), loaded, GUARD, NOW).step is Step.HOLD


def test_every_failure_is_reported_not_only_the_first() -> None:
    bad = facts(card_faults=3, row_remap_pending={"4": 2.0})

    decision = return_to_pool.decide(node(capacity=7, allocatable=7), bad, GUARD, NOW)

    failed = [check.name for check in decision.checks if check.status is Status.FAIL]
    assert failed == [Condition.GPUS_BACK, Condition.CARD_HISTORY, Condition.ROW_REMAP_PENDING]
    assert decision.blocking is not None
    assert decision.blocking.name is Condition.GPUS_BACK


def test_explain_checklist_shows_every_condition_with_status_and_evidence() -> None:
    decision = return_to_pool.decide(node(capacity=7, allocatable=7), facts(), GUARD, NOW)

    data = return_checklist.as_data(decision)
    table = return_checklist.rows(data)
    text = return_checklist.lines(data)

    assert json.loads(json.dumps(data)) == data
    assert data["step"] == "hold"
    assert data["blocking"] == "gpus-back"
    assert [row[1] for row in table] == [str(c) for c in model.ReturnCondition]
    assert table[2][2] == "FAIL"
    assert "capacity 7 != 8 at isolation" in table[2][3]
    assert text[0].startswith("return to pool: hold")
    assert any("gpuguard.io/gpu-capacity = 8" in line for line in text)


@pytest.mark.parametrize("reason", ["sxid-20034", "fabric-registration-failed"])
def test_a_fabric_fault_names_no_card_so_its_history_does_not_wait(reason: str) -> None:
    """docs/xid-events.md#persistent-states: the ledger is per card; a fabric fault names none."""
    decision = return_to_pool.decide(node(marks(reason)), facts(card_faults=None), GUARD, NOW)
    card = next(c for c in decision.checks if c.name is Condition.CARD_HISTORY)
    assert card.status is decisions.CheckStatus.PASS
    assert decision.step is Step.START_BURN_IN
    unknown_card = return_to_pool.decide(node(marks("xid-154")), facts(card_faults=None), GUARD,
                                         NOW)
    assert unknown_card.blocking is not None
    assert unknown_card.blocking.name is Condition.CARD_HISTORY  # any other fault still waits
