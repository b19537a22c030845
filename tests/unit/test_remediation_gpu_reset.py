"""The GPU-reset route (docs/remediation.md#gpu-reset): which card gpuguard resets itself (opt-in
pool, gpu-reset verdict, no hold, the card known, no pending or failed row remap, no process,
no GPU pod, the breaker's turn), at most once per isolation; the Job it creates and what it
writes when that Job ends; the card facts read from Prometheus; the return check that takes
gpuguard's own reset."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import lightkube
import pytest

from gpuguard.actuators import eviction
from gpuguard.controller import remediation as step
from gpuguard.controller import wiring
from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions, faults, fleet, ports, settings
from gpuguard.model import jobs as job_model
from gpuguard.model import metric_names as names
from gpuguard.model import remediation as model
from gpuguard.policy import remediation as policy
from gpuguard.policy import return_checks
from gpuguard.sim import kubeapi
from gpuguard.sources import prometheus, reset_cards
from tests import return_builders as rb
from tests.fakes import FakeLedger, FakeWriter

Step = policy.Step
POOL = "NVIDIA-H100-80GB-HBM3"
ON = settings.RemediationSettings(gpu_reset_pools=frozenset({POOL}))
NOW = rb.NOW
CARD = rb.CARD
IDLE = model.CardFacts(CARD, row_remap_pending=False, row_remap_failed=False, processes=0)


def isolated(name: str = "gpu-node-b", *, at: str = "2026-09-21T05:53:30Z",
             **extra: str) -> fleet.Node:  # fmt: skip
    marks = rb.marks("xid-48", **{keys.VERDICT: "gpu-reset"}) | {keys.ISOLATED_AT: at} | extra
    node = rb.node(marks, boot=rb.BOOT_AT_ISOLATION)  # not rebooted since the isolation
    return dataclasses.replace(node, name=name, labels={"nvidia.com/gpu.product": POOL})


def gpu_pod(name: str, node: str = "gpu-node-b") -> fleet.Pod:
    return fleet.Pod("team", name, node, fleet.PodPhase.RUNNING, gpu_request=1)


class NoPower:
    """The power port of a Remediation that must never power-cycle here."""

    def power_cycle(self, node: str, pool: str | None) -> ports.PowerCycled:
        raise AssertionError(f"a GPU reset power-cycled {node}")


class NoEvictions:
    def evict(self, pod_namespace: str, name: str) -> eviction.Evicted:
        raise AssertionError(f"a GPU reset evicted {pod_namespace}/{name}")


@dataclasses.dataclass
class Writer(FakeWriter):
    """FakeWriter plus the unconditional write of a claimed action's result."""

    def annotate_after_claim(self, node: str, annotations: dict[str, str | None]) -> None:
        self.annotated.append((node, dict(annotations)))


def snapshot(*nodes: fleet.Node, pods: tuple[fleet.Pod, ...] = ()) -> fleet.FleetSnapshot:
    return fleet.FleetSnapshot(taken_at=NOW, nodes=nodes, pods=pods)


def decide(*nodes: fleet.Node, card: model.CardFacts | None = IDLE,
           s: settings.RemediationSettings = ON,
           pods: tuple[fleet.Pod, ...] = ()) -> list[policy.Decision]:  # fmt: skip
    cards = {n.name: card for n in nodes if card is not None}
    return list(policy.decide(snapshot(*nodes, pods=pods), s, cards))


# --- policy ---------------------------------------------------------------------------------


def test_an_idle_held_card_of_an_opted_in_pool_is_reset() -> None:
    (d,) = decide(isolated())
    assert d.step is Step.GPU_RESET


def test_off_by_default_and_per_pool() -> None:
    assert [d.step for d in decide(isolated(), s=settings.RemediationSettings())] == [Step.NONE]
    power_only = settings.RemediationSettings(power_cycle_pools=frozenset({POOL}))
    assert [d.step for d in decide(isolated(), s=power_only)] == [Step.NONE]


def test_never_on_a_held_card() -> None:
    (d,) = decide(isolated(**{keys.HOLD: "inspect first"}))
    assert (d.step, d.detail) == (Step.NONE, f"{keys.HOLD} set by a person: no automated repair")


@pytest.mark.parametrize(("pending", "failed"), [(True, False), (False, True), (None, False),
                                                 (False, None)])
def test_never_with_a_pending_failed_or_unknown_row_remap(pending: bool | None,
                                                          failed: bool | None) -> None:
    card = dataclasses.replace(IDLE, row_remap_pending=pending, row_remap_failed=failed)
    (d,) = decide(isolated(), card=card)
    assert d.step is Step.NONE
    assert "row remap" in d.detail


@pytest.mark.parametrize("processes", [1, None])
def test_never_while_a_process_holds_the_card_or_none_can_say(processes: int | None) -> None:
    (d,) = decide(isolated(), card=dataclasses.replace(IDLE, processes=processes))
    assert d.step is Step.NONE
    assert "process" in d.detail


def test_a_node_rebooted_since_its_isolation_is_left_to_the_return_checks() -> None:
    node = dataclasses.replace(isolated(), boot_id=rb.BOOT_AFTER_POWER_CYCLE)
    assert [d.step for d in decide(node)] == [Step.NONE]


def test_no_facts_or_facts_of_another_card_reset_nothing() -> None:
    assert [d.step for d in decide(isolated(), card=None)] == [Step.NONE]
    other = dataclasses.replace(IDLE, uuid="GPU-ffffffff-0000-0000-0000-000000000000")
    assert [d.step for d in decide(isolated(), card=other)] == [Step.NONE]


def test_a_card_named_in_a_shape_admission_refuses_is_not_reset() -> None:
    node = isolated(**{keys.GPU_UUID: "GPU-1; reboot"})
    (d,) = decide(node, card=dataclasses.replace(IDLE, uuid="GPU-1; reboot"))
    assert d.step is Step.NONE
    assert "is not known" in d.detail


def test_never_while_a_gpu_pod_is_on_the_node() -> None:
    (d,) = decide(isolated(), pods=(gpu_pod("train-0"),))
    assert (d.step, d.detail) == (
        Step.NONE, "GPU pod(s) still on the node: team/train-0: no reset while they run")


def test_the_breaker_is_shared_with_the_power_cycle() -> None:
    first = isolated()
    second = isolated("gpu-node-c", at="2026-09-21T06:00:00Z")
    assert [d.step for d in decide(first, second)] == [Step.GPU_RESET, Step.WAIT]
    cycling = dataclasses.replace(first, annotations={**first.annotations, **{
        keys.VERDICT: "power-cycle", keys.REMEDIATION: model.Mark(
            model.Action.POWER_CYCLE, model.Result.DONE, NOW, "x", "on").render()}})
    both = settings.RemediationSettings(gpu_reset_pools=frozenset({POOL}),
                                        power_cycle_pools=frozenset({POOL}))
    assert [d.step for d in decide(cycling, second, s=both)] == [Step.NONE, Step.WAIT]


def test_a_started_reset_is_read_never_started_again_and_an_ended_one_is_left() -> None:
    started = model.Mark(model.Action.GPU_RESET, model.Result.STARTED, NOW,
                         "2026-09-21T05:53:30Z", "nvidia-smi -r", job="j=u")
    (d,) = decide(isolated(**{keys.REMEDIATION: started.render()}))
    assert d.step is Step.GPU_RESET_RESULT
    for result in (model.Result.DONE, model.Result.FAILED):
        ended = dataclasses.replace(started, result=result).render()
        assert [d.step for d in decide(isolated(**{keys.REMEDIATION: ended}))] == [Step.NONE]


# --- controller -----------------------------------------------------------------------------


class ResetJobs:
    """Records the Jobs created and answers their result as told."""

    def __init__(self, state: job_model.JobState = job_model.JobState.RUNNING,
                 detail: str = "") -> None:  # fmt: skip
        self.made: list[dict[str, Any]] = []
        self.read: list[tuple[str, str | None]] = []
        self.answer = job_model.JobResult(state, detail=detail)

    def create(self, manifest: dict[str, Any]) -> str | None:
        self.made.append(manifest)
        return "uid-1"

    def result(self, name: str, created_uid: str | None = None) -> job_model.JobResult:
        self.read.append((name, created_uid))
        return self.answer


def remediation(writer: Writer, resets: ResetJobs,
                ledger: FakeLedger | None = None) -> step.Remediation:  # fmt: skip
    return step.Remediation(NoPower(), NoEvictions(), writer, ON, ledger=ledger, reset_jobs=resets,
                            reset_job=step.ResetJob("ghcr.io/gpuguard/gpuguard:0.1.0"),
                            cards=lambda snap: {n.name: IDLE for n in snap.nodes})  # fmt: skip


def _run(node: fleet.Node, writer: Writer, resets: ResetJobs,
         ledger: FakeLedger | None = None) -> step.Outcome:  # fmt: skip
    (out,) = remediation(writer, resets, ledger).run(snapshot(node), NOW, may_write=lambda: True)
    return out


def _after(node: fleet.Node, writer: Writer) -> fleet.Node:
    """The node with what the writer wrote (the next tick's read)."""
    written = {k: v for _, marks in writer.annotated for k, v in marks.items() if v is not None}
    return dataclasses.replace(node, annotations={**node.annotations, **written})


def test_the_reset_job_is_claimed_then_created_pinned_to_the_card() -> None:
    writer, resets = Writer(), ResetJobs()
    out = _run(isolated(), writer, resets)
    assert out.done == "applied"
    (job,) = resets.made
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeName"] == "gpu-node-b"
    assert spec["containers"][0]["command"] == ["nvidia-smi", "-r", "-i", CARD]
    (_, claim), (_, made) = writer.annotated
    assert json.loads(claim[keys.REMEDIATION] or "")["result"] == "started"
    assert json.loads(made[keys.REMEDIATION] or "")["job"] == f"{job['metadata']['name']}=uid-1"
    assert [e.reason for e in writer.events] == [decisions.Reason.REMEDIATION_STARTED]


def test_a_running_job_writes_nothing_a_complete_one_is_done_with_event_and_ledger() -> None:
    writer, resets, ledger = Writer(), ResetJobs(), FakeLedger()
    node = isolated()
    _run(node, writer, resets)
    claimed = _after(node, writer)
    assert _run(claimed, Writer(), resets).done == "-"
    resets.answer = job_model.JobResult(job_model.JobState.SUCCEEDED)
    done_writer = Writer()
    out = _run(claimed, done_writer, resets, ledger)
    name = resets.made[0]["metadata"]["name"]
    assert resets.read[-1] == (name, "uid-1")
    assert out.result is not None
    assert out.result.result is model.Result.DONE
    assert [e.reason for e in done_writer.events] == [decisions.Reason.REMEDIATION_DONE]
    assert [e.kind for e in ledger.lines] == [faults.FaultKind.GPU_RESET]
    assert faults.FaultKind.GPU_RESET in faults.NOT_FAULTS
    # never again for this isolation
    again = _after(claimed, done_writer)
    assert [o.decision.step for o in remediation(Writer(), resets).run(
        snapshot(again), NOW, may_write=lambda: True)] == [Step.NONE]


@pytest.mark.parametrize(("state", "detail", "why"), [
    (job_model.JobState.FAILED, "DeadlineExceeded: Job was active longer than specified",
     "DeadlineExceeded"),
    (job_model.JobState.FAILED, "BackoffLimitExceeded: Job has reached the specified backoff",
     "BackoffLimitExceeded"),
    (job_model.JobState.ABSENT, "", "is gone"),
])
def test_a_failed_reset_ends_in_the_persons_request_with_the_reason(
    state: job_model.JobState, detail: str, why: str
) -> None:
    writer, resets = Writer(), ResetJobs()
    node = isolated(**{keys.REQUEST: "reset GPU 0000:99:00.0"})
    _run(node, writer, resets)
    resets.answer = job_model.JobResult(state, detail=detail)
    failed = Writer()
    out = _run(_after(node, writer), failed, resets)
    assert out.result is not None
    assert out.result.result is model.Result.FAILED
    ((_, marks),) = failed.annotated
    assert (marks[keys.REQUEST] or "").startswith("automated GPU reset failed (")
    assert why in (marks[keys.REQUEST] or "")
    assert (marks[keys.REQUEST] or "").endswith("reset the GPU by hand. reset GPU 0000:99:00.0")
    assert [e.reason for e in failed.events] == [decisions.Reason.REMEDIATION_FAILED]


# --- the card facts (Prometheus) --------------------------------------------------------------


def _sample(name: str, value: float, **labels: str) -> fleet.MetricSample:
    return fleet.MetricSample(name, labels, value, NOW)


def test_card_facts_read_the_cards_own_series_and_leave_the_rest_unknown() -> None:
    samples = [_sample(names.DCGM_ROW_REMAP_PENDING, 0, UUID=CARD, Hostname="gpu-node-b"),
               _sample(names.DCGM_ROW_REMAP_FAILURE, 0, UUID=CARD, Hostname="gpu-node-b"),
               _sample(names.GPU_PROCESSES, 2, uuid="GPU-other", node="gpu-node-b")]
    facts = reset_cards.card_facts(CARD, samples)
    assert facts == model.CardFacts(CARD, False, False, None)
    samples.append(_sample(names.GPU_PROCESSES, 0, uuid=CARD, node="gpu-node-b"))
    samples.append(_sample(names.DCGM_ROW_REMAP_PENDING, 1, UUID=CARD, Hostname="gpu-node-b"))
    assert reset_cards.card_facts(CARD, samples) == model.CardFacts(CARD, True, False, 0)


def test_only_nodes_waiting_for_a_reset_are_asked_about() -> None:
    other = dataclasses.replace(isolated("gpu-node-c"), annotations=rb.marks(
        **{keys.VERDICT: "power-cycle"}))
    assert reset_cards.waiting(snapshot(isolated(), other)) == {"gpu-node-b": CARD}


# --- the return check -------------------------------------------------------------------------


def _reset_check(node: fleet.Node) -> decisions.CheckStatus:
    (check,) = [c for c in return_checks.run(return_checks.context_of(node, rb.facts(), rb.GUARD,
                                                                       NOW))
                if c.name is return_checks.Condition.REBOOTED_OR_RESET]
    return check.status


def test_gpuguards_done_reset_after_the_isolation_counts_as_the_reset() -> None:
    done = model.Mark(model.Action.GPU_RESET, model.Result.DONE, rb.ISOLATED_AT
                      + timedelta(minutes=5), rb.stamp(rb.ISOLATED_AT), "exit 0", job="j=u")
    node = isolated(**{keys.REMEDIATION: done.render(), keys.ISOLATED_AT: rb.stamp(rb.ISOLATED_AT)})
    assert _reset_check(node) is decisions.CheckStatus.PASS
    failed = dataclasses.replace(done, result=model.Result.FAILED)
    node = isolated(**{keys.REMEDIATION: failed.render(),
                       keys.ISOLATED_AT: rb.stamp(rb.ISOLATED_AT)})
    assert _reset_check(node) is decisions.CheckStatus.FAIL
    earlier = dataclasses.replace(done, isolated_at="2026-01-01T00:00:00Z")
    node = isolated(**{keys.REMEDIATION: earlier.render(),
                       keys.ISOLATED_AT: rb.stamp(rb.ISOLATED_AT)})
    assert _reset_check(node) is decisions.CheckStatus.FAIL


# --- the controller's wiring ------------------------------------------------------------------


def test_the_controller_wires_the_reset_only_for_an_opted_in_pool_and_fails_closed() -> None:
    client = lightkube.Client(config=kubeapi.lightkube_config("http://127.0.0.1:9"))

    def read(plan: prometheus.Plan) -> prometheus.PrometheusSource:
        return prometheus.PrometheusSource("http://127.0.0.1:9", plan, timeout_s=0.5)

    off = settings.GuardSettings()
    shared = wiring.shared_ledger(client, "gpuguard")
    assert wiring.remediation_step(client, Writer(), off, None, read=read,  # type: ignore[arg-type]
                                   fault_ledger=shared) is None
    on = settings.GuardSettings.model_validate({"remediation": {"gpu_reset_pools": [POOL]}})
    made = wiring.remediation_step(client, Writer(), on, None, read=read,  # type: ignore[arg-type]
                                   fault_ledger=shared)
    assert made is not None
    assert made.reset_jobs is not None
    assert made.reset_job == step.ResetJob(on.controller.image, on.controller.namespace,
                                           on.controller.job_runtime_class)  # fmt: skip
    assert made.cards is not None
    # Prometheus unreachable: no card facts, so no reset (never on an unknown)
    assert made.cards(snapshot(isolated())) == {}
    assert [d.step for d in policy.decide(snapshot(isolated()), on.remediation, {})] == [
        Step.NONE]
