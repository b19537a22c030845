"""Anyone who can annotate nodes can write gpuguard's keys with any value. Whatever they
write, the policies that read them never crash: they decide, or refuse with an InputError
that names the annotation and its value, and that node alone waits."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from gpuguard.catalog import xid as xid_catalog
from gpuguard.errors import InputError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import fleet, jobs, settings
from gpuguard.model import return_to_pool as return_model
from gpuguard.policy import freshness, isolate, recovery, return_checks, return_to_pool

NOW = datetime(2026, 9, 21, 6, 0, tzinfo=UTC)
CATALOG = xid_catalog.load_catalog()
GUARD = settings.GuardSettings()
KEYS = [*keys.PER_ISOLATION, keys.HOLD, keys.RESET_DONE, keys.INSPECTED, keys.GATE_REPORT]
PLAUSIBLE = st.sampled_from(
    ["2026-09-21T05:53:00Z", "yesterday", "xid-79", "xid-²", "xid-٣", "", "0000:99:00.0",
     "0000:zz:00.0", "GPU-1a2b", "power-cycle", "9" * 40, "2026-13-45T99:99:99Z", "null"]
)  # fmt: skip
VALUE = st.one_of(PLAUSIBLE, st.text(max_size=40))
MARKS = st.dictionaries(st.sampled_from(KEYS), VALUE, max_size=len(KEYS))
JOB = st.builds(
    jobs.JobResult, st.sampled_from(list(jobs.JobState)),
    st.one_of(st.none(), st.text(max_size=60), st.just('{"verdict": "power-cycle"}')),
    st.text(max_size=30),
)  # fmt: skip


def node(marks: dict[str, str], cordoned: bool = True) -> fleet.Node:
    return fleet.Node("gpu-node-x", "boot-1", 8, 7, unschedulable=cordoned, annotations=marks,
                      conditions={"Ready": "True"})  # fmt: skip


def names_the_input(error: InputError, marks: dict[str, str]) -> bool:
    text = str(error)
    return any(key in text or repr(value) in text for key, value in marks.items())


@given(MARKS, JOB)
def test_recovery_decides_or_names_the_bad_annotation(marks: dict[str, str], job: jobs.JobResult)\
        -> None:  # fmt: skip
    marks = {keys.ISOLATED_AT: "2026-09-21T05:53:00Z", **marks}
    refused: InputError | None = None
    try:
        step = recovery.decide(node(marks), job, [], CATALOG, NOW)
    except InputError as e:
        refused = e
    if refused is not None:
        assert names_the_input(refused, marks), refused
    else:
        assert step.node == "gpu-node-x"


@given(MARKS, st.booleans())
def test_the_return_decision_never_crashes_and_never_returns_on_a_bad_mark(
    marks: dict[str, str], cordoned: bool
) -> None:
    passed = return_model.BurninResult(
        return_model.BurninOutcome.PASSED, return_model.BurninMode.MATMUL_AND_MEMTEST,
        "boot-1", NOW,
    )  # fmt: skip
    facts = return_model.ReturnFacts(
        pods=(), hardware_xids_since_boot=(), card_faults=1, row_remap_pending={},
        conformance={}, pcie_links=(), burnin=passed,
    )  # fmt: skip
    decision = return_to_pool.decide(node(marks, cordoned), facts, GUARD, NOW)
    assert len(decision.checks) == len(return_model.ReturnCondition)
    isolated = return_checks.parse_stamp(marks.get(keys.ISOLATED_AT))
    if isolated is None or isolated >= NOW:
        assert decision.step is not return_model.ReturnStep.UNCORDON


@given(st.lists(MARKS, min_size=1, max_size=5))
def test_isolation_and_freshness_never_crash_on_any_fleet_of_marks(
    fleet_marks: list[dict[str, str]],
) -> None:
    nodes = tuple(
        fleet.Node(f"gpu-node-{i}", "b", 8, 8, unschedulable=bool(i % 2), annotations=marks,
                   conditions={"Ready": "True"})
        for i, marks in enumerate(fleet_marks)
    )  # fmt: skip
    snapshot = fleet.FleetSnapshot(taken_at=NOW, nodes=nodes)
    decision = isolate.decide(snapshot, CATALOG, GUARD)
    assert len(decision.actions) <= GUARD.isolation.max_isolations_per_tick
    assert len(freshness.silent_exporters(snapshot, GUARD.prometheus.staleness)) == len(nodes)
