"""``policy.remediation`` and ``controller.remediation``: which isolated node gpuguard
power-cycles itself (opt-in pool, power-cycle verdict, no hold, not rebooted, drained, the
breaker's turn), at most once per isolation, and what it writes (docs/remediation.md)."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime

import pytest

from gpuguard.actuators import eviction
from gpuguard.controller import remediation as step
from gpuguard.errors import ConflictError, GpuguardError, InputError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions, faults, fleet, ports, settings
from gpuguard.model import remediation as model
from gpuguard.policy import escalation
from gpuguard.policy import remediation as policy
from tests import return_builders as rb
from tests.fakes import FakeLedger, FakeWriter

Step = policy.Step
POOL = "NVIDIA-GeForce-RTX-5090"
ON = settings.RemediationSettings(power_cycle_pools=frozenset({POOL}),
                                  bmc_secrets={POOL: "bmc-rtx-5090"})
NOW = rb.NOW


def isolated(name: str = "gpu-node-b", *, at: str = "2026-09-21T05:53:30Z", pool: str = POOL,
             boot: str = rb.BOOT_AT_ISOLATION, **extra: str) -> fleet.Node:  # fmt: skip
    """gpuguard's isolation with a power-cycle verdict, not rebooted since."""
    marks = rb.marks(**{keys.VERDICT: "power-cycle"}) | {keys.ISOLATED_AT: at} | extra
    return dataclasses.replace(
        rb.node(marks, boot=boot), name=name, labels={"nvidia.com/gpu.product": pool}
    )


def snapshot(*nodes: fleet.Node, pods: tuple[fleet.Pod, ...] = ()) -> fleet.FleetSnapshot:
    return fleet.FleetSnapshot(taken_at=NOW, nodes=nodes, pods=pods)


def gpu_pod(name: str, node: str = "gpu-node-b", **labels: str) -> fleet.Pod:
    return fleet.Pod("team", name, node, fleet.PodPhase.RUNNING, gpu_request=1, labels=labels)


def steps(
    snap: fleet.FleetSnapshot, s: settings.RemediationSettings = ON
) -> list[tuple[str, Step]]:
    return [(d.node, d.step) for d in policy.decide(snap, s)]


def mark(result: model.Result, *, action: model.Action = model.Action.POWER_CYCLE) -> str:
    return model.Mark(action, result, NOW, "2026-09-21T05:53:30Z", "x").render()


# --- policy ---------------------------------------------------------------------------------


def test_a_drained_node_of_an_opted_in_pool_is_power_cycled() -> None:
    assert steps(snapshot(isolated())) == [("gpu-node-b", Step.POWER_CYCLE)]


def test_off_by_default_and_per_pool() -> None:
    assert steps(snapshot(isolated()), settings.RemediationSettings()) == [
        ("gpu-node-b", Step.NONE)]
    assert steps(snapshot(isolated(pool="H100"))) == [("gpu-node-b", Step.NONE)]


@pytest.mark.parametrize("verdict", ["rma", "human-diagnosis"])
def test_only_a_power_cycle_verdict(verdict: str) -> None:
    node = isolated(**{keys.VERDICT: verdict})
    (decision,) = policy.decide(snapshot(node), ON)
    assert (decision.step, decision.detail) == (
        Step.NONE, f"verdict {verdict}: no automated repair for it")


def test_never_on_a_held_node() -> None:
    (decision,) = policy.decide(snapshot(isolated(**{keys.HOLD: "rma ticket 4711"})), ON)
    assert decision.step is Step.NONE
    assert decision.detail == f"{keys.HOLD} set by a person: no automated repair"


def test_never_twice_for_one_isolation_whatever_the_result() -> None:
    for result in model.Result:
        node = isolated(**{keys.REMEDIATION: mark(result)})
        assert steps(snapshot(node)) == [("gpu-node-b", Step.NONE)]


def test_a_malformed_mark_stops_the_repair_and_takes_a_turn() -> None:
    broken = isolated(**{keys.REMEDIATION: "{not json"})
    with pytest.raises(InputError, match=r"gpuguard\.io/remediation"):
        model.read(broken.annotations)
    other = isolated("gpu-node-c", at="2026-09-21T06:00:00Z")
    assert steps(snapshot(broken, other)) == [("gpu-node-b", Step.NONE),
                                              ("gpu-node-c", Step.WAIT)]  # fmt: skip


def test_a_node_rebooted_since_its_isolation_is_left_to_the_return_checks() -> None:
    assert steps(snapshot(isolated(boot=rb.BOOT_AFTER_POWER_CYCLE))) == [
        ("gpu-node-b", Step.NONE)]


def test_a_human_cordon_or_a_node_without_verdict_is_not_a_candidate() -> None:
    human = dataclasses.replace(isolated(), annotations={})
    waiting = isolated()
    waiting = dataclasses.replace(
        waiting, annotations={k: v for k, v in waiting.annotations.items() if k != keys.VERDICT})
    assert steps(snapshot(human, waiting)) == []


def test_gpu_pods_are_drained_first_daemonsets_and_gpuguards_jobs_stay() -> None:
    pods = (gpu_pod("train-0"), gpu_pod("evidence", **{"gpuguard.io/job": "evidence"}),
            fleet.Pod("kube-system", "dcgm-exporter-x", "gpu-node-b", fleet.PodPhase.RUNNING),
            dataclasses.replace(gpu_pod("done"), phase=fleet.PodPhase.SUCCEEDED))  # fmt: skip
    (decision,) = policy.decide(snapshot(isolated(), pods=pods), ON)
    assert decision.step is Step.DRAIN
    assert [p.name for p in decision.pods] == ["train-0"]


def test_two_nodes_while_the_breaker_allows_one_go_one_at_a_time() -> None:
    first, second = isolated(), isolated("gpu-node-c", at="2026-09-21T06:00:00Z")
    assert steps(snapshot(second, first)) == [("gpu-node-b", Step.POWER_CYCLE),
                                              ("gpu-node-c", Step.WAIT)]  # fmt: skip
    # the first power-cycled: in flight until it returns; the second still waits
    cycled = isolated(boot=rb.BOOT_AFTER_POWER_CYCLE, **{keys.REMEDIATION: mark(model.Result.DONE)})
    assert steps(snapshot(cycled, second)) == [("gpu-node-b", Step.NONE),
                                               ("gpu-node-c", Step.WAIT)]  # fmt: skip
    # returned (the return removes the per-isolation marks): the second's turn
    returned = dataclasses.replace(cycled, unschedulable=False, annotations={})
    assert steps(snapshot(returned, second)) == [("gpu-node-c", Step.POWER_CYCLE)]
    # a failed burn-in holds the first for a person: it no longer takes the turn
    failed = isolated(boot=rb.BOOT_AFTER_POWER_CYCLE, **{
        keys.REMEDIATION: mark(model.Result.DONE), keys.RETURN_FAILED: "burn-in failed"})
    assert steps(snapshot(failed, second))[1] == ("gpu-node-c", Step.POWER_CYCLE)


def test_a_failed_power_cycle_takes_no_turn() -> None:
    failed = isolated(**{keys.REMEDIATION: mark(model.Result.FAILED)})
    second = isolated("gpu-node-c", at="2026-09-21T06:00:00Z")
    assert steps(snapshot(failed, second))[1] == ("gpu-node-c", Step.POWER_CYCLE)


def test_a_hand_off_pool_publishes_instead_and_is_cleared_after_the_return() -> None:
    s = settings.RemediationSettings(hand_off_pools=frozenset({POOL}))
    assert steps(snapshot(isolated()), s) == [("gpu-node-b", Step.HAND_OFF)]
    back = dataclasses.replace(isolated(), unschedulable=False, annotations={},
                               conditions={model.HAND_OFF_CONDITION: "True"})  # fmt: skip
    assert steps(snapshot(back), s) == [("gpu-node-b", Step.CLEAR_HAND_OFF)]


def test_a_pool_cannot_have_two_actors() -> None:
    with pytest.raises(InputError, match="one actor per node"):
        settings.GuardSettings.load(None, {
            "GPUGUARD_REMEDIATION__POWER_CYCLE_POOLS": POOL,
            "GPUGUARD_REMEDIATION__HAND_OFF_POOLS": POOL})  # fmt: skip


# --- controller -----------------------------------------------------------------------------


class Bmc:
    """A PowerControl that answers as told and records the calls (the Redfish adapter itself
    is tested against sushy-emulator: tests/integration/test_redfish_power.py)."""

    def __init__(self, answer: ports.PowerCycled) -> None:
        self.answer, self.calls = answer, list[tuple[str, str | None]]()

    def power_cycle(self, node: str, pool: str | None) -> ports.PowerCycled:
        self.calls.append((node, pool))
        return self.answer


class Evictions:
    def __init__(self, blocked: frozenset[str] = frozenset()) -> None:
        self.blocked, self.asked = blocked, list[str]()

    def evict(self, pod_namespace: str, name: str) -> eviction.Evicted:
        self.asked.append(name)
        return eviction.Evicted.BLOCKED if name in self.blocked else eviction.Evicted.EVICTED


class Conditions:
    def __init__(self) -> None:
        self.set: list[tuple[str, str, bool, str]] = []

    def set_condition(self, node: str, condition: str, status: bool, reason: str,
                      message: str, now: datetime) -> None:  # fmt: skip
        self.set.append((node, condition, status, reason))


@dataclasses.dataclass
class Writer(FakeWriter):
    """FakeWriter plus the unconditional write of a claimed action's result."""

    def annotate_after_claim(self, node: str, annotations: dict[str, str | None]) -> None:
        self.annotated.append((node, dict(annotations)))


def remediation(bmc: Bmc, writer: Writer, evictions: Evictions | None = None,
                s: settings.RemediationSettings = ON) -> step.Remediation:  # fmt: skip
    return step.Remediation(bmc, evictions or Evictions(), writer, s, hand_off=Conditions())


def test_a_power_cycle_writes_its_mark_and_an_event() -> None:
    bmc, writer = Bmc(ports.PowerCycled(True, "system 1: On -> PowerCycle")), Writer()
    (out,) = remediation(bmc, writer).run(snapshot(isolated()), NOW, may_write=lambda: True)
    assert out.done == "applied"
    assert bmc.calls == [("gpu-node-b", POOL)]
    (_, claim), (node, marks) = writer.annotated
    assert json.loads(claim[keys.REMEDIATION] or "")["result"] == "started"
    assert node == "gpu-node-b"
    assert set(marks) == {keys.REMEDIATION}
    assert json.loads(marks[keys.REMEDIATION] or "") == {
        "action": "power-cycle", "result": "done", "at": "2026-09-22T16:30:00Z",
        "isolated_at": "2026-09-21T05:53:30Z", "detail": "system 1: On -> PowerCycle"}
    assert [e.reason for e in writer.events] == [decisions.Reason.REMEDIATION_DONE]


def test_a_refusing_bmc_ends_in_the_persons_request_with_the_reason_once() -> None:
    refused = "BMC https://10.0.0.9 refused (401): HTTP POST ... Unauthorized"
    bmc, writer = Bmc(ports.PowerCycled(False, refused)), Writer()
    node = isolated(**{keys.REQUEST: "power-cycle gpu-node-b (Xid 79 on 0000:99:00.0)"})
    remediation(bmc, writer).run(snapshot(node), NOW, may_write=lambda: True)
    _, (_, marks) = writer.annotated
    assert marks[keys.REQUEST] == (f"automated power cycle failed ({refused}): power-cycle the "
                                   "node by hand. power-cycle gpu-node-b (Xid 79 on 0000:99:00.0)")
    written = model.read({keys.REMEDIATION: marks[keys.REMEDIATION] or ""})
    assert written is not None
    assert written.result is model.Result.FAILED
    assert [e.reason for e in writer.events] == [decisions.Reason.REMEDIATION_FAILED]
    # the next tick sees the mark: no second try
    written_marks = {k: v for k, v in marks.items() if v is not None}
    again = dataclasses.replace(node, annotations={**node.annotations, **written_marks})
    outs = remediation(bmc, writer).run(snapshot(again), NOW, may_write=lambda: True)
    assert [o.decision.step for o in outs] == [Step.NONE]
    assert len(bmc.calls) == 1


def test_a_drain_evicts_through_the_eviction_api_and_never_power_cycles_yet() -> None:
    bmc, writer = Bmc(ports.PowerCycled(True, "-")), Writer()
    evictions = Evictions(blocked=frozenset({"train-1"}))
    pods = (gpu_pod("train-0"), gpu_pod("train-1"))
    (out,) = remediation(bmc, writer, evictions).run(snapshot(isolated(), pods=pods), NOW,
                                                     may_write=lambda: True)  # fmt: skip
    assert (out.decision.step, out.done) == (Step.DRAIN, "applied")
    assert evictions.asked == ["train-0", "train-1"]
    assert bmc.calls == []
    (event,) = writer.events
    assert "evicted train-0" in event.detail
    assert "refused" in event.detail
    assert "train-1" in event.detail


def test_dry_run_and_a_standby_write_nothing() -> None:
    bmc, writer = Bmc(ports.PowerCycled(True, "-")), Writer()
    (out,) = remediation(bmc, writer).run(snapshot(isolated()), NOW, may_write=lambda: False)
    assert out.done == "dry-run"
    assert bmc.calls == []
    assert writer.annotated == []


def test_a_hand_off_sets_the_condition_and_its_mark() -> None:
    s = settings.RemediationSettings(hand_off_pools=frozenset({POOL}))
    bmc, writer = Bmc(ports.PowerCycled(True, "-")), Writer()
    rem = remediation(bmc, writer, s=s)
    (out,) = rem.run(snapshot(isolated()), NOW, may_write=lambda: True)
    assert out.done == "applied"
    assert bmc.calls == []
    assert isinstance(rem.hand_off, Conditions)
    condition = ("gpu-node-b", model.HAND_OFF_CONDITION, True, "PowerCycleRequired")
    assert rem.hand_off.set == [condition]
    written = model.read({keys.REMEDIATION: writer.annotated[-1][1][keys.REMEDIATION] or ""})
    assert written is not None
    assert written.result is model.Result.PUBLISHED


def test_the_claim_comes_first_a_conflict_on_it_power_cycles_nothing() -> None:
    bmc = Bmc(ports.PowerCycled(True, "-"))
    writer = Writer(errors={"gpu-node-b": ConflictError("node changed since read")})
    (out,) = remediation(bmc, writer).run(snapshot(isolated()), NOW, may_write=lambda: True)
    assert out.done == "error: node changed since read"
    assert bmc.calls == []


def test_a_started_mark_is_never_repeated_and_holds_its_turn() -> None:
    started = isolated(**{keys.REMEDIATION: mark(model.Result.STARTED)})
    second = isolated("gpu-node-c", at="2026-09-21T06:00:00Z")
    assert steps(snapshot(started, second)) == [("gpu-node-b", Step.NONE),
                                                ("gpu-node-c", Step.WAIT)]  # fmt: skip


def test_a_hand_off_whose_condition_cannot_be_written_ends_in_the_persons_request() -> None:
    class Refused(Conditions):
        def set_condition(self, node: str, condition: str, status: bool, reason: str,
                          message: str, now: datetime) -> None:  # fmt: skip
            raise GpuguardError("patching nodes/gpu-node-b/status: Forbidden (403)")

    s = settings.RemediationSettings(hand_off_pools=frozenset({POOL}))
    writer = Writer()
    rem = step.Remediation(Bmc(ports.PowerCycled(True, "-")), Evictions(), writer, s,
                           hand_off=Refused())  # fmt: skip
    (out,) = rem.run(snapshot(isolated()), NOW, may_write=lambda: True)
    assert out.result is not None
    assert out.result.result is model.Result.FAILED
    (_, claim), (_, marks) = writer.annotated
    assert json.loads(claim[keys.REMEDIATION] or "")["result"] == "started"
    assert (marks[keys.REQUEST] or "").startswith(
        "hand-off failed (patching nodes/gpu-node-b/status: Forbidden (403))")


def test_no_drain_and_no_power_cycle_without_a_bmc_secret_for_the_node_or_its_pool() -> None:
    none = settings.RemediationSettings(power_cycle_pools=frozenset({POOL}))
    (decision,) = policy.decide(snapshot(isolated(), pods=(gpu_pod("train-0"),)), none)
    assert (decision.step, decision.detail) == (Step.NONE, (
        f"no BMC Secret for node gpu-node-b or pool {POOL} (remediation.bmc_secrets): the "
        "person's request stands"))
    own = settings.RemediationSettings(power_cycle_pools=frozenset({POOL}),
                                       bmc_secrets={"gpu-node-b": "bmc-gpu-node-b"})
    assert steps(snapshot(isolated()), own) == [("gpu-node-b", Step.POWER_CYCLE)]


@pytest.mark.parametrize(("ok", "kind"), [(True, faults.FaultKind.POWER_CYCLED),
                                          (False, faults.FaultKind.POWER_CYCLE_FAILED)])
def test_the_power_cycle_is_a_ledger_line_of_the_card_that_escalation_never_counts(
    ok: bool, kind: faults.FaultKind
) -> None:
    ledger = FakeLedger()
    rem = step.Remediation(Bmc(ports.PowerCycled(ok, "-")), Evictions(), Writer(), ON,
                           ledger=ledger)  # fmt: skip
    rem.run(snapshot(isolated()), NOW, may_write=lambda: True)
    (line,) = ledger.lines
    assert (line.at, line.node, line.kind, line.pci, line.uuid) == (
        NOW, "gpu-node-b", kind, "0000:99:00.0", rb.CARD)
    fault = dataclasses.replace(line, at=rb.ISOLATED_AT, kind=faults.FaultKind.XID, xid=79)
    assert escalation.card_fault_count([fault, line], rb.CARD) == 1


def test_an_unwritable_ledger_keeps_the_power_cycle_and_its_mark() -> None:
    ledger = FakeLedger(error=GpuguardError("ledger ConfigMap: 503"))
    writer = Writer()
    rem = step.Remediation(Bmc(ports.PowerCycled(True, "-")), Evictions(), writer, ON,
                           ledger=ledger)  # fmt: skip
    (out,) = rem.run(snapshot(isolated()), NOW, may_write=lambda: True)
    assert out.result is not None
    assert out.result.result is model.Result.DONE
    assert len(writer.annotated) == 2


def test_only_the_node_whose_turn_it_is_is_drained() -> None:
    second = isolated("gpu-node-c", at="2026-09-21T06:00:00Z")
    pods = (gpu_pod("train-0"), gpu_pod("train-1", node="gpu-node-c"))
    assert steps(snapshot(isolated(), second, pods=pods)) == [("gpu-node-b", Step.DRAIN),
                                                              ("gpu-node-c", Step.WAIT)]
