"""The rollout of a declared change: waves (canaries, sizes, idle nodes, floors), verification
after the change, stop on failure, and other people's cordons never touched."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.errors import InputError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import change, decisions, fleet, return_to_pool, settings
from gpuguard.policy import admission, lifecycle, rollout

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PASS = decisions.CheckStatus.PASS
FAIL = decisions.CheckStatus.FAIL
Step = rollout.Step
SPEC = change.ChangeSpec(
    name="drv-580", driver="580.159.03", kernel="6.8.0-60-generic",
    waves=(1, "25%", "100%"), max_unavailable=3, min_available=0.5,
)  # fmt: skip
CHECKS = {"nvidia-match": PASS, "ipvs-persist": PASS, "ipvs-loaded": PASS}


def node(name: str, *, cordoned: bool = False, boot: str = "boot-1", ready: bool = True,
         **annotations: str) -> fleet.Node:
    return fleet.Node(name, boot, 8, 8, unschedulable=cordoned, annotations=annotations,
                      conditions={"Ready": "True" if ready else "False"})


def marked(name: str, phase: change.Phase, wave: int = 0, *, since: datetime = NOW,
           boot: str = "boot-1", check: str | None = None, **node_kw: object) -> fleet.Node:
    mark = change.NodeMark("drv-580", phase, wave, since, boot, check, gpus=8)
    cordoned = phase is not change.Phase.DONE
    return node(name, cordoned=cordoned, **{keys.CHANGE: mark.encode()}, **node_kw)  # type: ignore[arg-type]


def fleet_of(count: int, **facts: rollout.NodeFacts) -> list[rollout.NodeFacts]:
    out = [rollout.NodeFacts(node(f"n{i:02d}")) for i in range(count)]
    return [facts.get(f.node.name, f) for f in out]


def steps(plan: rollout.Plan, step: Step) -> list[str]:
    return sorted(a.node for a in plan.actions if a.step is step)


def test_wave_targets_are_cumulative_and_reach_the_pool() -> None:
    assert rollout.wave_targets((1, "25%", "100%"), 12, 0) == (1, 3, 12)
    assert rollout.wave_targets((1, "10%", "50%", "100%"), 12, 0) == (1, 2, 6, 12)
    assert rollout.wave_targets((2, 2), 12, 0) == (2, 4, 12)  # the rest is a last wave
    assert rollout.wave_targets((1, "100%"), 12, 2) == (2, 12)  # two named canaries


def test_the_first_wave_takes_one_idle_node_and_cordons_it_as_a_change() -> None:
    plan = rollout.plan(SPEC, fleet_of(12), NOW)
    (cordon,) = [a for a in plan.actions if a.step is Step.CORDON]
    assert cordon.node == "n00"
    assert cordon.cordon is True
    assert cordon.wave == 0
    mark = change.read_mark(dataclasses.replace(node("n00"), annotations=cordon.annotations))
    assert mark is not None
    assert mark.phase is change.Phase.CORDONED
    assert keys.ISOLATED_AT not in cordon.annotations  # never a fault isolation
    assert plan.state is change.RolloutState.RUNNING
    assert plan.out == 1


def test_named_canary_goes_first_and_busy_nodes_wait() -> None:
    busy = rollout.NodeFacts(node("n00"), gpu_pods=2)
    spec = dataclasses.replace(SPEC, canary=("n05",))
    plan = rollout.plan(spec, fleet_of(12, n00=busy), NOW)
    assert steps(plan, Step.CORDON) == ["n05"]
    plan = rollout.plan(SPEC, fleet_of(12, n00=busy), NOW)
    assert steps(plan, Step.CORDON) == ["n01"]  # the idle one, not the busy one


def test_a_cordoned_node_with_a_gpu_pod_waits_before_the_change_is_requested() -> None:
    facts = rollout.NodeFacts(marked("n00", change.Phase.CORDONED), gpu_pods=1)
    plan = rollout.plan(SPEC, fleet_of(12, n00=facts), NOW)
    assert plan.action_for("n00").step is Step.WAIT  # type: ignore[union-attr]
    idle = rollout.plan(SPEC, fleet_of(12, n00=dataclasses.replace(facts, gpu_pods=0)), NOW)
    apply = idle.action_for("n00")
    assert apply is not None
    assert apply.step is Step.APPLY
    assert apply.annotations[keys.CHANGE_REQUESTED] == "drv-580"


def test_the_next_wave_waits_for_the_canary_then_respects_size_and_floor() -> None:
    waiting = rollout.NodeFacts(marked("n00", change.Phase.APPLYING, boot="boot-1"))
    plan = rollout.plan(SPEC, fleet_of(12, n00=waiting), NOW)
    assert steps(plan, Step.CORDON) == []  # wave 1 holds one node
    done = rollout.NodeFacts(marked("n00", change.Phase.DONE))
    plan = rollout.plan(SPEC, fleet_of(12, n00=done), NOW)
    assert steps(plan, Step.CORDON) == ["n01", "n02"]  # 25 % of 12 = 3, one already done
    floor = dataclasses.replace(SPEC, waves=(1, "100%"), min_available=0.9)
    plan = rollout.plan(floor, fleet_of(12, n00=done), NOW)
    assert len(steps(plan, Step.CORDON)) == 1  # 11 of 12 must stay schedulable
    limit = dataclasses.replace(SPEC, waves=(1, "100%"), max_unavailable=2, min_available=0)
    assert len(steps(rollout.plan(limit, fleet_of(12, n00=done), NOW), Step.CORDON)) == 2


def test_busy_nodes_are_never_evicted_unless_the_change_opts_into_a_drain_window() -> None:
    cordoned = rollout.NodeFacts(marked("n00", change.Phase.CORDONED,
                                        since=NOW - timedelta(hours=5)), gpu_pods=2)
    never = rollout.plan(SPEC, fleet_of(12, n00=cordoned), NOW).action_for("n00")
    assert never is not None
    assert (never.step, never.evict) == (Step.WAIT, False)
    drains = dataclasses.replace(SPEC, drain_after=timedelta(hours=1))
    early = dataclasses.replace(cordoned, node=marked("n00", change.Phase.CORDONED,
                                                      since=NOW - timedelta(minutes=30)))
    assert rollout.plan(drains, fleet_of(12, n00=early), NOW).action_for("n00").evict is False  # type: ignore[union-attr]
    late = rollout.plan(drains, fleet_of(12, n00=cordoned), NOW).action_for("n00")
    assert late is not None
    assert (late.step, late.evict, late.annotations) == (Step.WAIT, True, {})
    busy = {f"n{i:02d}": rollout.NodeFacts(node(f"n{i:02d}"), gpu_pods=1) for i in range(12)}
    assert steps(rollout.plan(SPEC, fleet_of(12, **busy), NOW), Step.CORDON) == []
    assert steps(rollout.plan(drains, fleet_of(12, **busy), NOW), Step.CORDON) == ["n00"]


def test_a_human_cordon_and_a_fault_isolation_are_skipped_and_never_touched() -> None:
    human = rollout.NodeFacts(node("n00", cordoned=True))
    isolated = {keys.ISOLATED_AT: "2026-12-01T11:00:00Z"}
    fault = rollout.NodeFacts(node("n01", cordoned=True, **isolated))
    plan = rollout.plan(SPEC, fleet_of(12, n00=human, n01=fault), NOW)
    assert plan.action_for("n00").step is Step.SKIP  # type: ignore[union-attr]
    assert "someone else" in plan.action_for("n00").reason  # type: ignore[union-attr]
    assert "fault" in plan.action_for("n01").reason  # type: ignore[union-attr]
    assert all(a.annotations == {} and a.cordon is None
               for a in plan.actions if a.node in {"n00", "n01"})
    assert steps(plan, Step.CORDON) == ["n02"]


def applied(boot: str = "boot-2", **kw: object) -> rollout.NodeFacts:
    base = {"checks": CHECKS, "driver": "580.159.03", "kernel": "6.8.0-60-generic",
            "applied": True}
    rebooted = dataclasses.replace(marked("n00", change.Phase.APPLYING), boot_id=boot)
    return rollout.NodeFacts(rebooted, **(base | kw))  # type: ignore[arg-type]


def test_a_verified_node_is_burnt_in_on_the_boot_it_was_verified_on() -> None:
    plan = rollout.plan(SPEC, fleet_of(12, n00=applied()), NOW)
    burn = plan.action_for("n00")
    assert burn is not None
    assert burn.step is Step.BURN_IN
    assert burn.burnin is return_to_pool.BurninMode.MATMUL  # the Job to create
    assert burn.cordon is None  # still out of service
    assert "ipvs-loaded: PASS" in burn.evidence
    assert "driver 580.159.03" in burn.evidence
    mark = change.read_mark(dataclasses.replace(node("n00"), annotations=burn.annotations))
    assert mark is not None
    assert (mark.phase, mark.boot) == (change.Phase.BURN_IN, "boot-2")
    assert plan.waves[0].result == "running"
    assert plan.out == 1


def burning(result: return_to_pool.BurninOutcome | None, *, boot: str = "boot-2",
            since: datetime = NOW, failed: str = "") -> rollout.NodeFacts:
    on = marked("n00", change.Phase.BURN_IN, since=since, boot=boot)
    found = None if result is None else return_to_pool.BurninResult(
        result, return_to_pool.BurninMode.MATMUL, boot, NOW, failed, "8 GPU(s), min/max 0.97")
    return dataclasses.replace(applied(), node=dataclasses.replace(on, boot_id="boot-2"),
                               burnin=found)


def test_a_passed_burnin_returns_the_node_with_the_evidence() -> None:
    plan = rollout.plan(SPEC, fleet_of(12, n00=burning(return_to_pool.BurninOutcome.PASSED)), NOW)
    back = plan.action_for("n00")
    assert back is not None
    assert back.step is Step.UNCORDON
    assert back.cordon is False
    assert "burn-in (matmul): passed 8 GPU(s), min/max 0.97" in back.evidence
    assert "driver 580.159.03" in back.evidence
    assert plan.waves[0].result == "passed"


@pytest.mark.parametrize(("facts", "detail"), [
    (burning(return_to_pool.BurninOutcome.FAILED, failed="throughput-floor FAIL: GPU 3"), "GPU 3"),
    (burning(return_to_pool.BurninOutcome.RUNNING, since=NOW - timedelta(hours=3)), "not ended"),
    (burning(None, boot="boot-1"), "rebooted during"),  # a result of another boot never counts
])
def test_a_failed_burnin_stops_the_rollout_naming_it(facts: rollout.NodeFacts,
                                                       detail: str) -> None:
    plan = rollout.plan(SPEC, fleet_of(12, n00=facts), NOW)
    stop = plan.action_for("n00")
    assert stop is not None
    assert (stop.step, stop.cordon) == (Step.FAIL, None)  # stays cordoned
    assert plan.stopped_by == ("n00", "burn-in")
    assert detail in stop.evidence[0]
    assert steps(plan, Step.CORDON) == []


@pytest.mark.parametrize("result", [None, return_to_pool.BurninOutcome.RUNNING])
def test_a_burnin_under_way_waits_and_its_job_is_made_sure_of(
    result: return_to_pool.BurninOutcome | None,
) -> None:
    wait = rollout.plan(SPEC, fleet_of(12, n00=burning(result)), NOW).action_for("n00")
    assert wait is not None
    assert (wait.step, wait.burnin) == (Step.WAIT, return_to_pool.BurninMode.MATMUL)


def test_a_change_declared_without_burnin_returns_once_verified() -> None:
    spec = dataclasses.replace(SPEC, burnin=None)
    back = rollout.plan(spec, fleet_of(12, n00=applied()), NOW).action_for("n00")
    assert back is not None
    assert (back.step, back.burnin) == (Step.UNCORDON, None)


@pytest.mark.parametrize(("facts", "why"), [
    (applied(boot="boot-1"), "reboot"),  # not rebooted yet
    (applied(applied=False), "applied"),
    (applied(checks={**CHECKS, "ipvs-loaded": decisions.CheckStatus.UNKNOWN}), "ipvs-loaded"),
    (applied(driver=None), "versions"),
    (dataclasses.replace(applied(), node=dataclasses.replace(applied().node, gpu_allocatable=7)),
     "gpus"),
])
def test_missing_facts_wait_never_return(facts: rollout.NodeFacts, why: str) -> None:
    action = rollout.plan(SPEC, fleet_of(12, n00=facts), NOW).action_for("n00")
    assert action is not None
    assert action.step is Step.WAIT
    assert why in action.reason


def test_a_failed_check_stops_the_rollout_and_keeps_the_node_cordoned() -> None:
    facts = applied(checks={**CHECKS, "ipvs-loaded": FAIL})
    plan = rollout.plan(SPEC, fleet_of(12, n00=facts), NOW)
    stop = plan.action_for("n00")
    assert stop is not None
    assert stop.step is Step.FAIL
    assert stop.cordon is None
    assert plan.state is change.RolloutState.STOPPED
    assert plan.stopped_by == ("n00", "ipvs-loaded")
    assert steps(plan, Step.CORDON) == []
    assert plan.waves[0].result == "failed"
    # next tick, from the marks alone: still stopped, nothing new
    failed = rollout.NodeFacts(marked("n00", change.Phase.FAILED, check="ipvs-loaded"))
    again = rollout.plan(SPEC, fleet_of(12, n00=failed), NOW)
    assert again.stopped_by == ("n00", "ipvs-loaded")
    assert steps(again, Step.CORDON) == []


def test_a_driver_label_not_yet_relabelled_waits_then_fails_at_the_timeout() -> None:
    mark = change.NodeMark("drv-580", change.Phase.APPLYING, 0, NOW, "boot-1", gpus=8,
                           was="580.126.09|6.8.0-45-generic")
    stale_node = node("n00", cordoned=True, boot="boot-2", **{keys.CHANGE: mark.encode()})
    stale = dataclasses.replace(applied(driver="580.126.09"), node=stale_node)
    wait = rollout.plan(SPEC, fleet_of(12, n00=stale), NOW).action_for("n00")
    assert wait is not None
    assert wait.step is Step.WAIT
    assert "still the old driver-version" in wait.reason
    late = rollout.plan(SPEC, fleet_of(12, n00=stale), NOW + timedelta(hours=3))
    assert late.stopped_by == ("n00", "driver-version")


def test_a_wrong_version_fails_with_the_version_named() -> None:
    plan = rollout.plan(SPEC, fleet_of(12, n00=applied(driver="580.126.09")), NOW)
    assert plan.stopped_by == ("n00", "driver-version")


def test_a_stopped_rollout_returns_nodes_it_cordoned_but_did_not_change() -> None:
    failed = rollout.NodeFacts(marked("n00", change.Phase.FAILED, check="ipvs-loaded"))
    waiting = rollout.NodeFacts(marked("n01", change.Phase.CORDONED, 1), gpu_pods=1)
    plan = rollout.plan(SPEC, fleet_of(12, n00=failed, n01=waiting), NOW)
    release = plan.action_for("n01")
    assert release is not None
    assert release.step is Step.RELEASE
    assert release.cordon is False


def test_pause_starts_nothing_and_abort_releases() -> None:
    paused = dataclasses.replace(SPEC, control=change.Control.PAUSE)
    plan = rollout.plan(paused, fleet_of(12), NOW)
    assert steps(plan, Step.CORDON) == []
    assert plan.state is change.RolloutState.PAUSED
    aborted = dataclasses.replace(SPEC, control=change.Control.ABORT)
    cordoned = rollout.NodeFacts(marked("n00", change.Phase.CORDONED))
    plan = rollout.plan(aborted, fleet_of(12, n00=cordoned), NOW)
    assert steps(plan, Step.RELEASE) == ["n00"]
    assert plan.state is change.RolloutState.ABORTED


def test_kured_holding_its_lock_stops_new_nodes_and_requests() -> None:
    plan = rollout.plan(SPEC, fleet_of(12), NOW, kured_holder="gpu-node-7")
    assert steps(plan, Step.CORDON) == []
    assert "kured" in plan.actions[0].reason
    cordoned = rollout.NodeFacts(marked("n00", change.Phase.CORDONED))
    plan = rollout.plan(SPEC, fleet_of(12, n00=cordoned), NOW, kured_holder="gpu-node-7")
    assert plan.action_for("n00").step is Step.WAIT  # type: ignore[union-attr]


def test_a_change_that_never_comes_back_fails_after_its_timeout() -> None:
    late = NOW + SPEC.apply_timeout + timedelta(minutes=1)
    facts = rollout.NodeFacts(marked("n00", change.Phase.APPLYING))
    assert rollout.plan(SPEC, fleet_of(12, n00=facts), late).stopped_by == ("n00", "apply-timeout")


def test_completed_when_every_node_is_done() -> None:
    done = {f"n{i:02d}": rollout.NodeFacts(marked(f"n{i:02d}", change.Phase.DONE, min(i, 2)))
            for i in range(12)}
    plan = rollout.plan(SPEC, fleet_of(12, **done), NOW)
    assert plan.state is change.RolloutState.COMPLETED
    assert plan.out == 0


def test_change_cordons_count_in_the_breakers_level_not_its_rate() -> None:
    out = marked("n00", change.Phase.APPLYING)
    history = admission.history([out, marked("n01", change.Phase.DONE)])
    assert [(i.node, i.change) for i in history] == [("n00", True)]
    state = admission.admit([admission.Candidate("x", 0)], history, None, 4,
                            settings.IsolationSettings(), NOW).state
    assert state.unconfirmed == 1
    assert state.recent_unconfirmed == 0


def test_a_change_spec_is_checked_when_read() -> None:
    spec = change.parse_spec("drv", "driver: '580.159.03'\nwaves: [1, '25%', '100%']\n")
    assert spec.waves == (1, "25%", "100%")
    assert spec.reboot
    with pytest.raises(InputError, match="waves"):
        change.parse_spec("drv", "driver: x\nwaves: [0]\n")
    with pytest.raises(InputError, match="declare a driver"):
        change.parse_spec("drv", "waves: [1]\n")
    with pytest.raises(InputError, match="pause"):
        change.parse_spec("drv", "driver: x\n", control="stop")


@pytest.mark.parametrize(("old", "new"), sorted(change.RENAMED_KEYS.items()))
def test_a_change_declared_with_a_renamed_key_is_refused_naming_the_new_one(
    old: str, new: str,
) -> None:
    # Before the vocabulary was one word, the burn-in keys were burn_in / burn_in_timeout.
    with pytest.raises(InputError, match=f"change drv: change.yaml: {old} is now spelled {new}"):
        change.parse_spec("drv", f"driver: '580.159.03'\n{old}: none\n")
    assert change.parse_spec("drv", f"driver: '580.159.03'\n{new}: 1h\n"
                             if new.endswith("timeout") else
                             f"driver: '580.159.03'\n{new}: none\n").name == "drv"


@pytest.mark.parametrize(("text", "why"), [
    ("driver: '580.159.03'\nmethod: job\n", "names its job_template"),
    ("driver: '580.159.03'\njob_template: host-apt\n", "names its job_template"),
    ("driver: '580; curl x|sh'\nmethod: job\njob_template: host-apt\n", "not a package version"),
    ("driver: '580'\nmethod: job\njob_template: '../x'\n", "job_template"),
    ("driver: '580'\nburnin: stress\n", "burnin"),
])
def test_a_job_change_names_an_admins_template_and_passes_only_plain_versions(
    text: str, why: str,
) -> None:
    with pytest.raises(InputError, match=why):
        change.parse_spec("drv", text)
    ok = change.parse_spec("drv", "driver: '580.159.03'\nmethod: job\njob_template: host-apt\n"
                           "burnin: none\n")
    assert (ok.method, ok.job_template, ok.burnin) == (change.Method.JOB, "host-apt", None)


def test_a_change_cordon_is_its_own_lifecycle_state() -> None:
    state = lifecycle.LifecycleState
    assert lifecycle.state_of(marked("n00", change.Phase.APPLYING)) is state.CHANGING
    assert lifecycle.state_of(node("n01", cordoned=True)) is state.CORDONED_BY_HUMAN


def test_the_checks_that_passed_before_are_recorded_when_the_change_is_requested() -> None:
    idle = rollout.NodeFacts(marked("n00", change.Phase.CORDONED),
                             checks={**CHECKS, "rke2-version": decisions.CheckStatus.UNKNOWN})
    (apply,) = [a for a in rollout.plan(SPEC, fleet_of(12, n00=idle), NOW).actions
                if a.step is Step.APPLY]
    mark = change.read_mark(dataclasses.replace(node("n00"), annotations=apply.annotations))
    assert mark is not None
    assert mark.passed == tuple(sorted(CHECKS))  # rke2-version was not passing


@pytest.mark.parametrize(
    ("passed", "step"),
    [
        pytest.param(tuple(sorted(CHECKS)), Step.BURN_IN, id="passed-before-required-only"),
        pytest.param(None, Step.WAIT, id="older-mark-every-reported-check"),
    ],
)
def test_a_change_without_checks_requires_those_that_passed_before(
    passed: tuple[str, ...] | None, step: Step,
) -> None:
    mark = change.NodeMark("drv-580", change.Phase.APPLYING, 0, NOW, "boot-1", gpus=8,
                           passed=passed)
    after = node("n00", cordoned=True, boot="boot-2", **{keys.CHANGE: mark.encode()})
    unknown = {**CHECKS, "rke2-version": decisions.CheckStatus.UNKNOWN}
    facts = dataclasses.replace(applied(checks=unknown), node=after)
    action = rollout.plan(SPEC, fleet_of(12, n00=facts), NOW).action_for("n00")
    assert action is not None
    assert action.step is step, action.reason
