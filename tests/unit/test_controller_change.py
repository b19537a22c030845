"""The change-rollout step against fake ports: a whole rollout tick by tick, a controller
restart in the middle of it (the plan is the same from the cluster alone), kured's lock, a
human's cordon, 409s and dry-run."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.actuators import eviction
from gpuguard.controller import change as step
from gpuguard.model import annotation_keys as keys
from gpuguard.model import change, fleet, settings
from gpuguard.model import metric_names as names
from gpuguard.sources import changes as change_source
from tests import fakes

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
NAMES = [f"gpu-node-{i}" for i in range(4)]
CHECKS = ("nvidia-match", "ipvs-persist", "ipvs-loaded")
DECLARED = change_source.declared("drv-580", {
    change.SPEC_KEY: "driver: '580.159.03'\nkernel: 6.8.0-60-generic\nwaves: [1, '100%']\n"
                     "max_unavailable: 2\nmin_available: 0.5\n",
})  # fmt: skip


IMAGE = "ghcr.io/example/gpuguard:test"
burnins = fakes.FakeBurnins()


@pytest.fixture(autouse=True)
def _fresh_burnins() -> None:
    """Each test starts with no burn-in Job (they end when created, see fakes.FakeBurnins)."""
    burnins.created.clear()
    burnins.results.clear()
    burnins.failing.clear()


def cluster() -> fakes.FakeNodes:
    return fakes.FakeNodes({n: fleet.Node(
        n, f"{n}-boot-0", 8, 8, conditions={"Ready": "True"}, kernel_version="6.8.0-45-generic",
        labels={change.DRIVER_LABELS[0]: "580.126.09"}) for n in NAMES})  # fmt: skip


def agents(nodes: fakes.FakeNodes, failing: tuple[str, str] | None = None) -> fakes.FakeMetrics:
    """Every check PASS, but ``failing`` (node, check) FAILs once the change rebooted it."""
    series = [fleet.MetricSample(names.CHECK_STATUS, {"node": n, "check": c,
                                 "status": "FAIL" if (n, c) == failing and _changed(node)
                                 else "PASS"}, 1.0, START)
              for n, node in nodes.nodes.items() for c in CHECKS]  # fmt: skip
    return fakes.FakeMetrics(series)


def _changed(node: fleet.Node) -> bool:
    return node.boot_id.endswith("-boot-1")  # the_tool's reboot


def the_tool(nodes: fakes.FakeNodes) -> None:
    """The applying tool: installs, reboots, marks the node done (what a playbook does)."""
    for name, node in list(nodes.nodes.items()):
        wanted = node.annotations.get(keys.CHANGE_REQUESTED)
        if wanted and node.annotations.get(keys.CHANGE_APPLIED) != wanted:
            nodes.update(name, boot_id=f"{name}-boot-1", kernel_version="6.8.0-60-generic",
                         labels={change.DRIVER_LABELS[0]: "580.159.03"},
                         annotations={**node.annotations, keys.CHANGE_APPLIED: wanted})


def changes(nodes: fakes.FakeNodes, source: fakes.FakeChanges | None = None,
            failing: tuple[str, str] | None = None) -> step.Changes:
    return step.Changes(source=source or fakes.FakeChanges((DECLARED,)), writer=nodes,
                        checks=agents(nodes, failing), jobs=burnins, image=IMAGE,
                        kured=source or fakes.FakeChanges(), notifier=nodes)


def tick(nodes: fakes.FakeNodes, at: datetime, **kw: object) -> step.Outcome:
    (outcome,) = changes(nodes, **kw).run(nodes.snapshot(at), at,  # type: ignore[arg-type]
                                          may_write=lambda: True)
    return outcome


def test_a_rollout_runs_to_completion_one_canary_then_the_rest_within_limits() -> None:
    nodes, at, most_out = cluster(), START, 0
    for _ in range(12):
        outcome = tick(nodes, at)
        most_out = max(most_out, sum(n.unschedulable for n in nodes.nodes.values()))
        the_tool(nodes)
        at += timedelta(minutes=1)
    assert outcome.plan is not None
    assert outcome.plan.state is change.RolloutState.COMPLETED
    assert most_out == 2  # max_unavailable
    assert next(w.nodes for w in outcome.plan.waves) == ("gpu-node-0",)
    assert not any(n.unschedulable for n in nodes.nodes.values())
    assert all(keys.ISOLATED_AT not in n.annotations for n in nodes.nodes.values())


@pytest.mark.parametrize(("asked", "ceiling", "most"), [
    pytest.param("max_unavailable: 4\nmin_available: 0", (1, 0.0), 1, id="ceiling-below-ask"),
    pytest.param("max_unavailable: 4\nmin_available: 0", (4, 0.5), 2, id="admins-floor"),
    pytest.param("max_unavailable: 1\nmin_available: 0.5", (3, 0.0), 1, id="ask-below-ceiling"),
])
def test_a_change_never_takes_more_nodes_than_the_admins_ceiling(
    asked: str, ceiling: tuple[int, float], most: int
) -> None:
    greedy = change_source.declared("drv-580", {change.SPEC_KEY: (
        "driver: '580.159.03'\nwaves: ['100%']\n" + asked + "\n")})
    nodes, at, most_out = cluster(), START, 0
    limits = settings.ChangeLimitSettings(max_unavailable=ceiling[0], min_available=ceiling[1])
    for _ in range(3):
        step.Changes(source=fakes.FakeChanges((greedy,)), writer=nodes, checks=agents(nodes),
                     jobs=burnins, image=IMAGE, kured=fakes.FakeChanges(), notifier=nodes,
                     limits=limits).run(nodes.snapshot(at), at, may_write=lambda: True)
        most_out = max(most_out, sum(n.unschedulable for n in nodes.nodes.values()))
        at += timedelta(minutes=1)
    assert most_out == most


def test_a_restarted_controller_plans_the_same_rollout_from_the_marks() -> None:
    nodes, at = cluster(), START
    for _ in range(4):  # canary cordoned, applied, burnt in, returned; wave 2 starts
        tick(nodes, at)
        the_tool(nodes)
        at += timedelta(minutes=1)
    before = {n: node.annotations.get(keys.CHANGE) for n, node in nodes.nodes.items()}
    fresh = step.Changes(source=fakes.FakeChanges((DECLARED,)), writer=nodes,
                         checks=agents(nodes), jobs=burnins, image=IMAGE,
                         kured=fakes.FakeChanges())  # a new process
    (outcome,) = fresh.run(nodes.snapshot(at), at, may_write=lambda: True)
    assert outcome.plan is not None
    assert outcome.plan.waves[0].result == "passed"
    cordoned = [a.node for a in outcome.plan.actions if a.step.value == "cordon-for-change"]
    assert cordoned == []  # wave 2's two nodes were already out: none cordoned twice
    assert sum(1 for v in before.values() if v) == 3


def test_a_failed_check_stops_the_rollout_after_the_canary() -> None:
    nodes, at = cluster(), START
    for _ in range(6):
        outcome = tick(nodes, at, failing=("gpu-node-0", "ipvs-loaded"))
        the_tool(nodes)
        at += timedelta(minutes=1)
    assert outcome.plan is not None
    assert outcome.plan.stopped_by == ("gpu-node-0", "ipvs-loaded")
    assert nodes.nodes["gpu-node-0"].unschedulable
    assert [n for n, node in nodes.nodes.items() if node.unschedulable] == ["gpu-node-0"]
    assert all(nodes.nodes[n].labels[change.DRIVER_LABELS[0]] == "580.126.09"
               for n in NAMES[1:])  # the others keep the old driver
    assert any(e.reason == "change-failed" for e in nodes.events)
    (told,) = nodes.notified  # people are told once, when it stops
    assert "ipvs-loaded" in told.detail


def test_nothing_starts_while_kured_holds_its_lock() -> None:
    nodes = cluster()
    kured = fakes.FakeChanges((DECLARED,), kured_lock='{"nodeID":"gpu-node-3","TTL":0}')
    outcome = tick(nodes, START, source=kured)
    assert nodes.writes == []
    assert kured.kured_asked == [("kube-system", "kured")]
    assert outcome.plan is not None
    assert "kured" in outcome.plan.actions[0].reason


def test_a_human_cordon_is_skipped_and_left_alone() -> None:
    nodes = cluster()
    nodes.update("gpu-node-0", unschedulable=True)
    for i in range(8):
        tick(nodes, START + timedelta(minutes=i))
        the_tool(nodes)
    assert "gpu-node-0" not in {w[0] for w in nodes.writes}
    assert nodes.nodes["gpu-node-0"].unschedulable


def test_a_conflict_is_left_for_the_next_tick_and_dry_run_writes_nothing() -> None:
    nodes = cluster()
    nodes.conflicts.add("gpu-node-0")
    outcome = tick(nodes, START)
    assert outcome.done == {"gpu-node-0": "conflict"}
    assert nodes.writes == []
    (dry,) = changes(nodes).run(nodes.snapshot(START), START, may_write=lambda: False)
    assert dry.done == {"gpu-node-0": "dry-run"}
    assert nodes.writes == []


def test_an_unreadable_declaration_is_reported_and_starts_nothing() -> None:
    bad = change_source.declared("oops", {change.SPEC_KEY: "waves: [0]\n"})
    nodes = cluster()
    outcome = tick(nodes, START, source=fakes.FakeChanges((bad,)))
    assert outcome.plan is None
    assert "oops" in (outcome.error or "")
    assert nodes.writes == []


def test_explain_names_the_rollout_step_and_the_gpu_operators_budget() -> None:
    nodes = cluster()
    outcome = tick(nodes, START)  # gpu-node-0 cordoned for the change
    shown = step.explain(nodes.nodes["gpu-node-0"], [outcome])
    assert shown is not None
    assert "maxUnavailable" in (shown["gpu_operator"] or "")
    assert "a change" in shown["gpu_operator"]
    (row,) = step.explain(nodes.snapshot(START).node("gpu-node-1"), [outcome])["rollout"]  # type: ignore[index]
    assert row["change"] == "drv-580"
    assert row["step"] == "wait"
    assert step.explain(None, [outcome]) is None


@pytest.mark.parametrize(("lock", "holder"), [
    (None, None),
    ('{"nodeID":"manual"}', "manual"),  # a person's lock (kured's documentation)
    ('{"nodeID":"n1","created":"2026-12-01T11:00:00Z","TTL":1800000000000}', None),  # expired
    ('{"nodeID":"n1","created":"2026-12-01T11:50:00Z","TTL":1800000000000}', "n1"),
    ('{"maxOwners":2,"locks":[{"nodeID":"n1"},{"nodeID":"n2"}]}', "n1, n2"),
    ('{"maxOwners":2,"locks":[]}', None),
    ("not json", "unknown (unreadable lock)"),  # never read as free
])
def test_kureds_lock_as_kured_writes_it(lock: str | None, holder: str | None) -> None:
    assert change.kured_holder(lock, START) == holder


def test_a_failed_burnin_stops_the_rollout_and_the_canary_stays_cordoned() -> None:
    nodes, at = cluster(), START
    burnins.failing.add("gpu-node-0")
    for _ in range(6):
        outcome = tick(nodes, at)
        the_tool(nodes)
        at += timedelta(minutes=1)
    assert outcome.plan is not None
    assert outcome.plan.stopped_by == ("gpu-node-0", "burn-in")
    assert [n for n, node in nodes.nodes.items() if node.unschedulable] == ["gpu-node-0"]
    mark = change.read_mark(nodes.nodes["gpu-node-0"])
    assert mark is not None
    assert "throughput-floor" in mark.detail
    (job,) = burnins.created  # the return to pool's burn-in, pinned to the canary's new boot
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-node-0"
    assert pod["containers"][0]["command"][:2] == ["gpuguard", "burnin"]
    assert pod["containers"][0]["image"] == IMAGE
    assert job["metadata"]["annotations"] == {keys.CHANGE: "drv-580",
                                              keys.BOOT_ID: "gpu-node-0-boot-1"}


BY_JOB = change_source.declared("drv-580", {
    change.SPEC_KEY: "driver: '580.159.03'\nkernel: 6.8.0-60-generic\nwaves: [1, '100%']\n"
                     "max_unavailable: 2\nmin_available: 0.5\nmethod: job\n"
                     "job_template: host-apt\n",
})  # fmt: skip
INSTALLER = "registry.example/ops/host-apt:1"


class AdminTemplates:
    """The cluster admin's template ConfigMap (sources.changes.JobTemplates)."""

    def templates(self) -> dict[str, str]:
        return {"host-apt.image": INSTALLER, "host-apt.privileged": "true",
                "host-apt.script": 'apt-get install -y "nvidia-driver=$GPUGUARD_DRIVER"\n'}


def the_change_jobs(nodes: fakes.FakeNodes, ran: set[str]) -> None:
    """Each change Job that ended well installed the change and rebooted its node."""
    for job in burnins.created:
        name = job["metadata"]["name"]
        if job["metadata"]["labels"]["gpuguard.io/job"] != "change" or name in ran:
            continue
        ran.add(name)
        node = job["spec"]["template"]["spec"]["nodeName"]
        if node not in burnins.failing:
            nodes.update(node, boot_id=f"{node}-boot-1", kernel_version="6.8.0-60-generic",
                         labels={change.DRIVER_LABELS[0]: "580.159.03"})


def by_job(nodes: fakes.FakeNodes, at: datetime) -> step.Outcome:
    (outcome,) = step.Changes(
        source=fakes.FakeChanges((BY_JOB,)), writer=nodes, checks=agents(nodes),
        jobs=burnins, image=IMAGE, templates=AdminTemplates(), notifier=nodes,
    ).run(nodes.snapshot(at), at, may_write=lambda: True)  # fmt: skip
    return outcome


def test_a_rollout_by_job_runs_the_admins_template_pinned_to_each_node() -> None:
    nodes, at, ran = cluster(), START, set[str]()
    for _ in range(14):
        outcome = by_job(nodes, at)
        the_change_jobs(nodes, ran)
        at += timedelta(minutes=1)
    assert outcome.plan is not None
    assert outcome.plan.state is change.RolloutState.COMPLETED
    changed = [j for j in burnins.created
               if j["metadata"]["labels"]["gpuguard.io/job"] == "change"]
    assert sorted(j["spec"]["template"]["spec"]["nodeName"] for j in changed) == NAMES  # once each
    (container,) = changed[0]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == INSTALLER
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "GPUGUARD_CHANGE": "drv-580", "GPUGUARD_DRIVER": "580.159.03",
        "GPUGUARD_KERNEL": "6.8.0-60-generic"}
    assert changed[0]["spec"]["template"]["spec"]["serviceAccountName"] == "gpuguard-change"
    assert all(w[1].get(keys.CHANGE_REQUESTED) is None for w in nodes.writes)  # no tool asked
    assert not any(n.unschedulable for n in nodes.nodes.values())


def test_a_failed_change_job_stops_the_rollout_naming_apply() -> None:
    nodes, at, ran = cluster(), START, set[str]()
    burnins.failing.add("gpu-node-0")
    for _ in range(5):
        outcome = by_job(nodes, at)
        the_change_jobs(nodes, ran)
        at += timedelta(minutes=1)
    assert outcome.plan is not None
    assert outcome.plan.stopped_by == ("gpu-node-0", "apply")
    assert [n for n, node in nodes.nodes.items() if node.unschedulable] == ["gpu-node-0"]


def test_a_job_change_without_the_admins_template_creates_nothing_and_times_out() -> None:
    nodes = cluster()
    empty = step.Changes(source=fakes.FakeChanges((BY_JOB,)), writer=nodes, checks=agents(nodes),
                         jobs=burnins, image=IMAGE, templates=None)
    for i in range(3):
        empty.run(nodes.snapshot(START + timedelta(minutes=i)), START + timedelta(minutes=i),
                  may_write=lambda: True)
    assert burnins.created == []
    late = START + timedelta(hours=3)
    (outcome,) = empty.run(nodes.snapshot(late), late, may_write=lambda: True)
    assert outcome.plan is not None
    assert outcome.plan.stopped_by == ("gpu-node-0", "apply-timeout")


class Evictions:
    """The Eviction API: a PodDisruptionBudget refuses the pods named in ``budgeted``."""

    def __init__(self, budgeted: set[str]) -> None:
        self.budgeted = budgeted
        self.asked: list[tuple[str, str]] = []

    def evict(self, pod_namespace: str, name: str) -> eviction.Evicted:
        self.asked.append((pod_namespace, name))
        return eviction.Evicted.BLOCKED if name in self.budgeted else eviction.Evicted.EVICTED


def test_a_drain_window_evicts_the_busy_canarys_gpu_pods_through_the_eviction_api() -> None:
    nodes = cluster()
    drains = change_source.declared("drv-580", {
        change.SPEC_KEY: "driver: '580.159.03'\nwaves: [1, '100%']\ncanary: [gpu-node-0]\n"
                         "drain_after: 1h\n"})  # fmt: skip
    pods = (fleet.Pod("team-a", "train-0", "gpu-node-0", fleet.PodPhase.RUNNING, gpu_request=8),
            fleet.Pod("team-a", "train-1", "gpu-node-0", fleet.PodPhase.RUNNING, gpu_request=8),
            fleet.Pod("team-a", "web", "gpu-node-0", fleet.PodPhase.RUNNING))
    evictions = Evictions({"train-1"})
    roll = step.Changes(source=fakes.FakeChanges((drains,)), writer=nodes, checks=agents(nodes),
                        jobs=burnins, image=IMAGE, evictions=evictions)
    for minutes in (0, 30):
        at = START + timedelta(minutes=minutes)
        roll.run(dataclasses.replace(nodes.snapshot(at), pods=pods), at, may_write=lambda: True)
    assert nodes.nodes["gpu-node-0"].unschedulable  # taken though busy: the drain window
    assert evictions.asked == []  # not before the window
    at = START + timedelta(minutes=61)
    (outcome,) = roll.run(dataclasses.replace(nodes.snapshot(at), pods=pods), at,
                          may_write=lambda: True)
    assert evictions.asked == [("team-a", "train-0"), ("team-a", "train-1")]  # GPU pods only
    assert outcome.done["gpu-node-0"] == (
        "evicted 1, refused (PodDisruptionBudget or error): train-1")  # it waits on
