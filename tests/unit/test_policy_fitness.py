"""The yes/no "fit to run training" verdict: yes only when every check passes (or warns);
each thing gpuguard knows against the node is a no with its reason; unknown is never yes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gpuguard.catalog import dcgm_fields
from gpuguard.model import (
    annotation_keys,
    decisions,
    fleet,
    gpu_isolation,
    jobs,
    onboarding,
    withheld,
)
from gpuguard.model.decisions import CheckStatus, Reason
from gpuguard.policy import fitness, interconnect
from gpuguard.sources import onboarding as gate_source

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
READY = {"Ready": "True"}
PASSED = onboarding.BurninJob("burnin-gpu-1", (AT - timedelta(days=2)).isoformat(),
                              jobs.JobState.SUCCEEDED)


def healthy() -> fitness.FitnessFacts:
    node = fleet.Node("gpu-1", "boot", 8, 8, conditions=READY)
    return fitness.FitnessFacts(node, AT, (), None, {"swap": CheckStatus.PASS}, (PASSED,))


def judged(facts: fitness.FitnessFacts, require: bool = False) -> fitness.FitnessVerdict:
    return fitness.verdict(facts, require_conformance=require)


def failed(verdict: fitness.FitnessVerdict) -> dict[str, CheckStatus]:
    return {c.name: c.status for c in verdict.checks if c.status not in
            (CheckStatus.PASS, CheckStatus.WARN)}


def test_a_healthy_serving_node_is_fit() -> None:
    verdict = judged(healthy())
    assert verdict.fit
    assert verdict.reasons() == []


def test_cordoned_node_is_not_fit() -> None:
    facts = healthy()
    facts = replace(facts, node=replace(facts.node, unschedulable=True))
    assert failed(judged(facts)) == {"state": CheckStatus.FAIL}


def test_what_the_guard_decides_now_makes_it_unfit_and_no_decision_is_unknown() -> None:
    said = replace(healthy(), guard=("isolate hardware-xid-with-gpu-loss",))
    assert "hardware-xid-with-gpu-loss" in judged(said).reasons()[0]
    blind = replace(healthy(), guard_error="Prometheus is stale")
    assert failed(judged(blind)) == {"guard": CheckStatus.UNKNOWN}
    assert not judged(blind).fit


def test_withheld_fault_and_isolated_or_missing_gpus_are_not_fit() -> None:
    mark = withheld.WithheldMark(Reason.BREAKER_RATE, AT, "xid-79").to_annotation()
    entry = gpu_isolation.IsolatedGpu("GPU-3", "0000:1b:00.0", "3", AT, "xid-48", capacity=8)
    iso = gpu_isolation.to_annotation((entry,))
    assert iso is not None
    notes = {annotation_keys.WITHHELD: mark, annotation_keys.GPU_ISOLATED: iso}
    facts = healthy()
    node = replace(facts.node, gpu_allocatable=6, annotations=notes)
    verdict = judged(replace(facts, node=node))
    assert failed(verdict) == {"withheld": CheckStatus.FAIL, "gpus": CheckStatus.FAIL}
    gpus = next(c.detail for c in verdict.checks if c.name == "gpus")
    assert gpus == "GPU 3 isolated (xid-48); 1 GPU(s) missing (capacity 8 > allocatable 6)"


def test_conformance_fail_is_not_fit_and_no_agent_only_when_required() -> None:
    broken = replace(healthy(), check_status={"swap": CheckStatus.FAIL})
    assert failed(judged(broken)) == {"conformance": CheckStatus.FAIL}
    no_agent = replace(healthy(), check_status={})
    assert judged(no_agent).fit
    assert failed(judged(no_agent, require=True)) == {"conformance": CheckStatus.UNKNOWN}


def test_last_burnin_failed_or_running_is_not_fit() -> None:
    newer = (AT - timedelta(hours=1)).isoformat()
    for state in (jobs.JobState.FAILED, jobs.JobState.RUNNING):
        last = onboarding.BurninJob("burnin-2", newer, state)
        verdict = judged(replace(healthy(), burnin_jobs=(PASSED, last)))
        assert failed(verdict) == {"burn-in": CheckStatus.FAIL}, state
    assert judged(replace(healthy(), burnin_jobs=())).fit  # none on record: a warning


def test_throttling_or_link_errors_are_not_fit_and_unread_ones_a_warning() -> None:
    finding = decisions.Finding("nvlink-errors", "gpu-1", Reason.NVLINK_ERRORS, gpu="3",
                                detail="GPU 3: 50 NVLink CRC errors in 15 min")
    flapping = interconnect.NodeHealth("gpu-1", ("mlx5_0 port 1 flapped 4 times in 6 h",))
    problems = fitness.link_problems("gpu-1", [finding], [flapping])
    verdict = judged(replace(healthy(), links=problems))
    assert failed(verdict) == {"interconnect": CheckStatus.FAIL}
    assert "persistent: mlx5_0" in verdict.reasons()[0]
    assert fitness.link_problems("gpu-2", [finding], [flapping]) == ()
    assert judged(replace(healthy(), links_unread="Prometheus down")).fit


def test_telemetry_names_each_dcgm_field_not_collected_and_what_goes_blind() -> None:
    everything = frozenset(f.name for f in dcgm_fields.FIELDS)
    defaults = frozenset(f.name for f in dcgm_fields.FIELDS if f.default)
    checks = {name: fitness.telemetry(present) for name, present in [
        ("all", everything), ("defaults", defaults), ("none", frozenset()), ("unread", None)]}
    assert checks["all"].status is CheckStatus.PASS
    assert checks["defaults"].status is CheckStatus.WARN
    assert checks["defaults"].detail.startswith("15 not collected: ")
    assert "DCGM_FI_DEV_PSTATE (blind: phantom-utilization" in checks["defaults"].detail
    assert checks["none"].detail == "no dcgm-exporter series in Prometheus"
    assert checks["unread"].status is CheckStatus.WARN
    verdict = judged(replace(healthy(), dcgm_series=defaults))
    assert verdict.fit  # a blind check is no fault of the node


def test_a_malformed_condition_time_is_named_as_a_warning() -> None:
    """The node and its condition are named in the checks (the time is unknown to gpuguard);
    the GPUs are no less fit for it."""
    bad = ("GpuFallenOffBus lastTransitionTime 'yesterday'",)
    verdict = judged(replace(healthy(), malformed_times=bad))
    assert verdict.fit
    [check] = [c for c in verdict.checks if c.name == "conditions"]
    assert (check.status, check.detail) == (
        CheckStatus.WARN,
        "time not RFC 3339 (read as unknown): GpuFallenOffBus lastTransitionTime 'yesterday'",
    )
    assert [c.status for c in judged(healthy()).checks if c.name == "conditions"] == [
        CheckStatus.PASS
    ]


def test_health_and_gate_read_the_malformed_times_from_the_nodes_raw_json() -> None:
    """``gpuguard health`` reads the node as the API server sent it (``sources.onboarding``),
    so one bad time neither breaks the read nor goes unnamed."""
    raw = {"metadata": {"name": "gpu-1"}, "status": {"conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "yesterday"},
        {"type": "MemoryPressure", "status": "False",
         "lastTransitionTime": "2026-03-01T12:00:00Z"},
    ]}}  # fmt: skip
    node = gate_source.gate_node(raw)
    assert (node.name, node.malformed_times) == ("gpu-1", ("Ready lastTransitionTime 'yesterday'",))
