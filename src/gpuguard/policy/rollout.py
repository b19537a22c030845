"""The rollout of a declared host change, in canary waves (docs/change-management.md).

In: the change, every node's facts (its GPU pods, cordon and gpuguard's marks, conformance
check statuses, driver and kernel versions), kured's lock holder and now. Out: what to do to
each node, with the reason and the evidence, and where the rollout stands. The only state is
the nodes' ``gpuguard.io/change`` marks, so the same inputs after a restart give the same plan.

The rules:

- the pool is the nodes the change selects; nodes are taken wave by wave, named canaries
  first; a wave's size is a node count or a cumulative share of the pool (``"25%"``);
- a node is taken only when it is schedulable (a cordon by a person, another tool or a
  gpuguard fault isolation is skipped and reported — never touched), holds no GPU pod (never
  evict training; with the opt-in ``drain_after`` a busy node is taken too, idle ones first,
  and its GPU pods are evicted through the Eviction API once it waited that long), fewer
  than ``max_unavailable`` nodes are out for the change and the pool keeps
  ``min_available`` of its nodes schedulable;
- it is cordoned first and the change requested only once its GPU pods ended (a pod that
  landed before the cordon runs to its end);
- after the change the node must have rebooted (when the change needs it), be Ready, run the
  declared driver and kernel, and every required check must PASS; then the burn-in (the
  Job the return to pool runs, on the boot just verified) must pass; a FAIL (or a wrong
  version, a failed burn-in, or a timeout) stops the rollout and keeps the node cordoned
  with the check named;
- nothing new starts while kured holds its reboot lock: two tools never reboot at once;
- ``pause`` starts nothing new; ``abort`` also returns the nodes not yet changed.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from gpuguard.errors import InputError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import change as model
from gpuguard.model import decisions, fleet, settings
from gpuguard.model import return_to_pool as return_model
from gpuguard.model.node_marks import Isolation

Phase = model.Phase
Status = decisions.CheckStatus


class Step(StrEnum):
    """What the rollout does to one node this tick (``NONE``: nothing, only reported)."""

    CORDON = "cordon-for-change"
    APPLY = "apply"
    BURN_IN = "burn-in"
    UNCORDON = "uncordon"
    FAIL = "stop-rollout"
    RELEASE = "release"
    WAIT = "wait"
    SKIP = "skip"
    NONE = "none"


WRITES = frozenset({Step.CORDON, Step.APPLY, Step.BURN_IN, Step.UNCORDON, Step.FAIL,
                    Step.RELEASE})
LIVE = (Phase.CORDONED, Phase.APPLYING, Phase.BURN_IN)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """One node as the rollout reads it. ``checks``: the agent's statuses (empty: none
    reported); ``applied``: the change's tool reported it done (its mark, or its Job);
    ``burnin``: the burn-in Job of the boot the node's mark names (None: none exists)."""

    node: fleet.Node
    gpu_pods: int = 0
    checks: Mapping[str, Status] = field(default_factory=dict)
    kernel: str | None = None
    driver: str | None = None
    applied: bool = False
    apply_failed: str | None = None
    burnin: return_model.BurninResult | None = None


@dataclass(frozen=True, slots=True)
class NodeAction:
    """One node's step: the annotations to write (None removes), the cordon to set (None:
    leave), the reason and the evidence; ``burnin``: the burn-in Job to create if absent
    (its mode; on the boot in the node's mark); ``change_job``: the change's Job (method
    job) to create if absent."""

    node: str
    step: Step
    reason: str
    evidence: tuple[str, ...] = ()
    wave: int | None = None
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    cordon: bool | None = None
    check: str | None = None
    burnin: return_model.BurninMode | None = None
    change_job: bool = False
    evict: bool = False  # evict the node's GPU pods (Eviction API: PodDisruptionBudgets decide)


@dataclass(frozen=True, slots=True)
class Wave:
    index: int
    size: int
    nodes: tuple[str, ...]
    result: str  # passed | failed | running | pending


@dataclass(frozen=True, slots=True)
class Plan:
    change: str
    state: model.RolloutState
    waves: tuple[Wave, ...]
    actions: tuple[NodeAction, ...]
    pool: int
    out: int  # nodes out of service for this change after this plan's writes
    stopped_by: tuple[str, str] | None = None  # (node, check)
    nodes: Mapping[str, int] = field(default_factory=dict)  # pool nodes per phase, "pending"

    def action_for(self, node: str) -> NodeAction | None:
        return next((a for a in self.actions if a.node == node), None)


def bounded(spec: model.ChangeSpec, limits: settings.ChangeLimitSettings) -> model.ChangeSpec:
    """The change within the admin's ceiling: no more nodes out at once than
    ``limits.max_unavailable``, no less of the pool schedulable than ``limits.min_available``
    (a change's author cannot cordon every idle node at once)."""
    return dataclasses.replace(
        spec, max_unavailable=min(spec.max_unavailable, limits.max_unavailable),
        min_available=max(spec.min_available, limits.min_available))


def wave_targets(waves: Sequence[model.WaveSize], pool: int, canaries: int) -> tuple[int, ...]:
    """Cumulative node counts at the end of each wave. A count adds that many nodes, a
    percentage is a share of the pool reached by then; every wave adds at least one node, the
    last one reaches the whole pool, and named canaries make the first wave."""
    targets: list[int] = []
    done = 0
    for i, wave in enumerate(waves):
        if i == 0 and canaries:
            nxt = canaries
        elif isinstance(wave, int):
            nxt = done + wave
        else:
            nxt = max(done + 1, math.ceil(int(wave.rstrip("%")) * pool / 100))
        done = min(pool, nxt)
        targets.append(done)
        if done >= pool:
            break
    if not targets or targets[-1] < pool:
        targets.append(pool)
    return tuple(targets)


def plan(
    spec: model.ChangeSpec,
    facts: Sequence[NodeFacts],
    now: datetime,
    *,
    kured_holder: str | None = None,
) -> Plan:
    """The rollout's next steps; see the module docstring for the rules."""
    pool = sorted((f for f in facts if spec.selects(f.node)), key=lambda f: f.node.name)
    marks, actions = _marks(spec, pool)
    targets = wave_targets(spec.waves, len(pool), len([c for c in spec.canary
                                                       if any(f.node.name == c for f in pool)]))
    for f in pool:
        mark = marks.get(f.node.name)
        if mark is not None and mark.phase in LIVE:
            actions.append(_advance(spec, f, mark, now, kured_holder))
    failed = _failed(marks, actions)
    stopping = failed is not None or spec.control is model.Control.ABORT
    if stopping:
        actions = [_release(a) if _not_applied(a, marks) else a for a in actions]
    elif spec.control is model.Control.RUN:
        actions += _start(spec, pool, marks, actions, targets, now, kured_holder)
    out = _out_after(pool, marks, actions)
    phases = _phases(marks, actions)
    waves = _waves(targets, phases, {n: m.wave for n, m in marks.items()}, actions)
    counts = {str(p): sum(1 for q in phases.values() if q is p) for p in Phase}
    return Plan(spec.name, _state(spec, failed, pool, marks, actions), waves, tuple(actions),
                len(pool), out, failed, {**counts, "pending": len(pool) - len(phases)})


def _marks(
    spec: model.ChangeSpec, pool: Sequence[NodeFacts]
) -> tuple[dict[str, model.NodeMark], list[NodeAction]]:
    """This change's marks; a node with an unreadable mark or another change's live mark is
    skipped (never guessed to be outside the rollout)."""
    marks: dict[str, model.NodeMark] = {}
    skipped: list[NodeAction] = []
    for f in pool:
        try:
            mark = model.read_mark(f.node)
        except InputError as e:
            skipped.append(NodeAction(f.node.name, Step.SKIP, str(e)))
            continue
        if mark is None:
            continue
        if mark.change != spec.name:
            if mark.phase is not Phase.DONE:
                skipped.append(NodeAction(f.node.name, Step.SKIP,
                                          f"in change {mark.change} ({mark.phase})"))
            continue
        marks[f.node.name] = mark
    return marks, skipped


def _advance(
    spec: model.ChangeSpec,
    f: NodeFacts,
    mark: model.NodeMark,
    now: datetime,
    kured_holder: str | None,
) -> NodeAction:
    name = f.node.name
    if mark.phase is Phase.CORDONED:
        if f.gpu_pods:
            return _busy(spec, f, mark, now)
        if kured_holder is not None and spec.reboot:
            return NodeAction(name, Step.WAIT, f"kured holds its reboot lock ({kured_holder})",
                              wave=mark.wave)
        applying = model.NodeMark(spec.name, Phase.APPLYING, mark.wave, now, f.node.boot_id,
                                  gpus=mark.gpus, was=f"{f.driver or ''}|{f.kernel or ''}",
                                  passed=_passing(f))
        request = {keys.CHANGE_REQUESTED: spec.name} if spec.method is model.Method.EXTERNAL else {}
        return NodeAction(name, Step.APPLY, f"idle and cordoned: change {spec.name} requested",
                          (f"boot {f.node.boot_id[:8]}",), mark.wave,
                          {keys.CHANGE: applying.encode(), **request},
                          change_job=spec.method is model.Method.JOB)
    if mark.phase is Phase.BURN_IN:
        return _burned_in(spec, f, mark, now)
    return _verify(spec, f, mark, now)


def _busy(spec: model.ChangeSpec, f: NodeFacts, mark: model.NodeMark,
          now: datetime) -> NodeAction:
    """GPU pods still run on the cordoned node: wait for them to end, or, past the opt-in
    drain window, evict them (a PodDisruptionBudget may refuse: then it waits on)."""
    waited = now - mark.since
    if spec.drain_after is None:
        return NodeAction(f.node.name, Step.WAIT, f"{f.gpu_pods} GPU pod(s) still running: "
                          "waiting for them to end (no drain window: never evicted)",
                          wave=mark.wave)
    if waited < spec.drain_after:
        return NodeAction(f.node.name, Step.WAIT, f"{f.gpu_pods} GPU pod(s) still running: "
                          f"evicted after {spec.drain_after} cordoned", wave=mark.wave)
    return NodeAction(f.node.name, Step.WAIT, f"{f.gpu_pods} GPU pod(s) still running after "
                      f"{waited}: evicting them (PodDisruptionBudgets decide)", wave=mark.wave,
                      evict=True)


def _verify(spec: model.ChangeSpec, f: NodeFacts, mark: model.NodeMark,
            now: datetime) -> NodeAction:
    """After the change: applied, rebooted, Ready, the versions, then every required check."""
    name, waited = f.node.name, now - mark.since
    if f.apply_failed:
        return _fail(spec, f, mark, now, "apply", f.apply_failed)
    if not f.applied or (spec.reboot and f.node.boot_id == mark.boot) or not f.node.ready:
        if waited > spec.apply_timeout:
            return _fail(spec, f, mark, now, "apply-timeout",
                         f"not applied, rebooted and Ready after {waited}")
        what = ("the change to be applied" if not f.applied else
                "the reboot" if spec.reboot and f.node.boot_id == mark.boot else "Ready")
        return NodeAction(name, Step.WAIT, f"waiting for {what}", wave=mark.wave,
                          change_job=not f.applied and spec.method is model.Method.JOB)
    before = dict(zip(("driver-version", "kernel-version"), mark.was.split("|"), strict=False))
    stale = []  # still the version it ran before: gpu-feature-discovery has not relabelled yet
    for declared, seen, check in ((spec.driver, f.driver, "driver-version"),
                                  (spec.kernel, f.kernel, "kernel-version")):
        if declared is not None and seen is not None and not seen.startswith(declared):
            if seen != before.get(check):
                return _fail(spec, f, mark, now, check, f"runs {seen}, declared {declared}")
            stale.append(check)
    required = _required(spec, f, mark) | _gpus_back(f, mark)
    failing = sorted(c for c, s in required.items() if s is Status.FAIL)
    if failing:
        return _fail(spec, f, mark, now, failing[0], f"check {failing[0]}: FAIL")
    pending = sorted(c for c, s in required.items() if s not in (Status.PASS, Status.FIXED))
    versions = [(d, s) for d, s in ((spec.driver, f.driver), (spec.kernel, f.kernel))
                if d is not None and s is None]
    if stale or pending or versions or not required:
        if waited > spec.apply_timeout + spec.verify_timeout:
            return _fail(spec, f, mark, now, (stale or pending or ["conformance-unknown"])[0],
                         "still the version it ran before the change" if stale
                         else "checks not reported as PASS in time")
        return NodeAction(name, Step.WAIT, "waiting for the checks: " + (
            "still the old " + ", ".join(stale) if stale else ", ".join(pending) if pending
            else "versions not reported" if versions else "no check reported"), wave=mark.wave)
    evidence = tuple(f"{c}: PASS" for c in sorted(required)) + _versions(f)
    if spec.burnin is not None:
        burning = model.NodeMark(spec.name, Phase.BURN_IN, mark.wave, now, f.node.boot_id,
                                 gpus=mark.gpus)
        return NodeAction(name, Step.BURN_IN, "changed, rebooted, every check PASS: burn-in",
                          evidence, mark.wave, {keys.CHANGE: burning.encode()},
                          burnin=spec.burnin)
    return _uncordon(spec, name, mark, now, "changed, rebooted, every check PASS", evidence)


def _uncordon(spec: model.ChangeSpec, node: str, mark: model.NodeMark, now: datetime,
              reason: str, evidence: tuple[str, ...]) -> NodeAction:
    done = model.NodeMark(spec.name, Phase.DONE, mark.wave, now, mark.boot)
    return NodeAction(node, Step.UNCORDON, reason, evidence, mark.wave,
                      {keys.CHANGE: done.encode(), keys.CHANGE_REQUESTED: None}, cordon=False)


def _burned_in(spec: model.ChangeSpec, f: NodeFacts, mark: model.NodeMark,
               now: datetime) -> NodeAction:
    """The burn-in on the boot that was verified: passed returns the node, failed (or not
    ended within ``burnin_timeout``, or the node rebooted meanwhile) stops the rollout."""
    result, mode = f.burnin, spec.burnin or return_model.BurninMode.MATMUL
    if f.node.boot_id != mark.boot:
        return _fail(spec, f, mark, now, BURN_IN, "the node rebooted during its burn-in")
    if result is not None and result.outcome is return_model.BurninOutcome.FAILED:
        return _fail(spec, f, mark, now, BURN_IN, result.failed_check or "failed")
    if result is not None and result.outcome is return_model.BurninOutcome.PASSED:
        return _uncordon(spec, f.node.name, mark, now, "changed, every check PASS, burn-in "
                         "passed", (f"burn-in ({mode}): passed {result.detail}".strip(),
                                    *_versions(f)))
    if now - mark.since > spec.burnin_timeout:
        return _fail(spec, f, mark, now, BURN_IN, f"not ended after {now - mark.since}")
    what = "running" if result is not None else "starting"
    return NodeAction(f.node.name, Step.WAIT, f"burn-in ({mode}) {what}", wave=mark.wave,
                      burnin=mode)


def _passing(f: NodeFacts) -> tuple[str, ...]:
    return tuple(sorted(c for c, s in f.checks.items() if s in (Status.PASS, Status.FIXED)))


def _required(spec: model.ChangeSpec, f: NodeFacts, mark: model.NodeMark) -> dict[str, Status]:
    """The checks that must PASS after the change: the change's own list, else those that
    passed on this node before it (a check that could never pass there, e.g. rke2-version
    UNKNOWN without a declared control-plane version, must not hold the rollout); a mark
    from before this was recorded falls back to every check the node reports."""
    if spec.checks is not None:
        names = set(spec.checks)
    else:
        names = set(mark.passed) if mark.passed is not None else set(f.checks)
    if spec.check:
        names.add(spec.check)
    return {c: f.checks.get(c, Status.UNKNOWN) for c in names}


GPUS = "gpus"
BURN_IN = "burn-in"  # the check a failed burn-in names


def _gpus_back(f: NodeFacts, mark: model.NodeMark) -> dict[str, Status]:
    """Every GPU it had is registered and offered again (UNKNOWN until then: a GPU that does
    not come back fails the rollout at its timeout)."""
    if not mark.gpus:
        return {}
    node = f.node
    back = node.gpu_capacity >= mark.gpus and node.gpu_allocatable == node.gpu_capacity
    return {GPUS: Status.PASS if back else Status.UNKNOWN}


def _versions(f: NodeFacts) -> tuple[str, ...]:
    return tuple(f"{what} {v}" for what, v in (("driver", f.driver), ("kernel", f.kernel)) if v)


def _fail(spec: model.ChangeSpec, f: NodeFacts, mark: model.NodeMark, now: datetime,
          check: str, detail: str) -> NodeAction:
    failed = model.NodeMark(spec.name, Phase.FAILED, mark.wave, now, mark.boot, check, detail)
    return NodeAction(f.node.name, Step.FAIL, f"{check} failed: the rollout stops, the node stays "
                      "cordoned", (detail, *_versions(f)), mark.wave,
                      {keys.CHANGE: failed.encode()}, check=check)


def _failed(marks: Mapping[str, model.NodeMark],
            actions: Sequence[NodeAction]) -> tuple[str, str] | None:
    for a in actions:
        if a.step is Step.FAIL:
            return a.node, a.check or "?"
    for name, mark in sorted(marks.items()):
        if mark.phase is Phase.FAILED:
            return name, mark.check or "?"
    return None


def _not_applied(action: NodeAction, marks: Mapping[str, model.NodeMark]) -> bool:
    mark = marks.get(action.node)
    return mark is not None and mark.phase is Phase.CORDONED


def _release(action: NodeAction) -> NodeAction:
    """A node cordoned for the change but not changed yet goes back to service."""
    return NodeAction(action.node, Step.RELEASE, "the rollout stopped before this node was "
                      "changed: back to service", wave=action.wave,
                      annotations={keys.CHANGE: None}, cordon=False)


def _start(
    spec: model.ChangeSpec,
    pool: Sequence[NodeFacts],
    marks: Mapping[str, model.NodeMark],
    actions: Sequence[NodeAction],
    targets: tuple[int, ...],
    now: datetime,
    kured_holder: str | None,
) -> list[NodeAction]:
    """New nodes for the current wave, within its size, the unavailable limit and the floor."""
    started = len(marks)
    done = sum(1 for m in marks.values() if m.phase is Phase.DONE) + sum(
        1 for a in actions if a.step is Step.UNCORDON)
    wave = next((i for i, t in enumerate(targets) if done < t), None)
    if wave is None:
        return []
    in_flight = sum(1 for m in marks.values() if m.phase in LIVE) - sum(
        1 for a in actions if a.step is Step.UNCORDON)
    schedulable = sum(1 for f in pool if not f.node.unschedulable) + sum(
        1 for a in actions if a.step is Step.UNCORDON)
    floor = math.ceil(spec.min_available * len(pool))
    room = min(targets[wave] - started, spec.max_unavailable - in_flight, schedulable - floor)
    skipped = {a.node for a in actions}
    canaries = set(spec.canary)
    out: list[NodeAction] = []
    for f in sorted(pool, key=lambda f: (f.gpu_pods > 0, f.node.name not in canaries,
                                         f.node.name)):
        name = f.node.name
        if name in marks or name in skipped:
            continue
        if wave == 0 and canaries and name not in canaries:
            continue
        why = _not_takeable(f, kured_holder, drains=spec.drain_after is not None)
        if why is None and room <= 0:
            why = _no_room(targets[wave] - started, spec.max_unavailable - in_flight,
                           schedulable - floor, wave)
        if why is not None:
            out.append(NodeAction(name, Step.SKIP if f.node.unschedulable else Step.WAIT, why,
                                  wave=wave))
            continue
        mark = model.NodeMark(spec.name, Phase.CORDONED, wave, now, f.node.boot_id,
                              gpus=f.node.gpu_capacity)
        out.append(NodeAction(name, Step.CORDON, f"wave {wave + 1}: cordoned for change "
                              f"{spec.name} (not a fault)", (f"GPU pods {f.gpu_pods}",), wave,
                              {keys.CHANGE: mark.encode()}, cordon=True))
        room -= 1
    return out


def _not_takeable(f: NodeFacts, kured_holder: str | None, *, drains: bool) -> str | None:
    if f.node.unschedulable:
        if f.node.marks.isolation is not Isolation.NONE:
            return "isolated by gpuguard for a fault: skipped"
        return "cordoned by someone else: skipped, never touched"
    if f.gpu_pods and not drains:
        return f"{f.gpu_pods} GPU pod(s) running: waits until idle (gpuguard never evicts)"
    if kured_holder is not None:
        return f"kured holds its reboot lock ({kured_holder})"
    return None


def _no_room(wave_left: int, unavailable_left: int, floor_left: int, wave: int) -> str:
    if wave_left <= 0:
        return f"wave {wave + 1} is full: waits for the next wave"
    if unavailable_left <= 0:
        return "max_unavailable nodes already out for the change"
    return "the pool's min_available floor leaves no room"


def _out_after(pool: Sequence[NodeFacts], marks: Mapping[str, model.NodeMark],
               actions: Sequence[NodeAction]) -> int:
    out = {n for n, m in marks.items() if m.phase is not Phase.DONE}
    for a in actions:
        if a.cordon is True:
            out.add(a.node)
        elif a.cordon is False:
            out.discard(a.node)
    return len(out)


_AFTER = {Step.CORDON: Phase.CORDONED, Step.APPLY: Phase.APPLYING, Step.BURN_IN: Phase.BURN_IN,
          Step.UNCORDON: Phase.DONE, Step.FAIL: Phase.FAILED}


def _phases(marks: Mapping[str, model.NodeMark],
            actions: Sequence[NodeAction]) -> dict[str, Phase]:
    """Each node's phase in this change once this plan's writes are made."""
    phases = {n: m.phase for n, m in marks.items()}
    for a in actions:
        if a.step in _AFTER:
            phases[a.node] = _AFTER[a.step]
        elif a.step is Step.RELEASE:
            phases.pop(a.node, None)
    return phases


def _waves(targets: tuple[int, ...], phases: Mapping[str, Phase], marked: Mapping[str, int],
           actions: Sequence[NodeAction]) -> tuple[Wave, ...]:
    waves_of = dict(marked) | {a.node: a.wave for a in actions
                               if a.step is Step.CORDON and a.wave is not None}
    out = []
    for i, target in enumerate(targets):
        size = target - (targets[i - 1] if i else 0)
        nodes = tuple(sorted(n for n, w in waves_of.items() if w == i and n in phases))
        got = [phases[n] for n in nodes]
        result = ("failed" if Phase.FAILED in got else
                  "passed" if len(got) >= size and all(p is Phase.DONE for p in got) else
                  "running" if got else "pending")
        out.append(Wave(i, size, nodes, result))
    return tuple(out)


def _state(
    spec: model.ChangeSpec,
    failed: tuple[str, str] | None,
    pool: Sequence[NodeFacts],
    marks: Mapping[str, model.NodeMark],
    actions: Sequence[NodeAction],
) -> model.RolloutState:
    if failed is not None:
        return model.RolloutState.STOPPED
    done = {n for n, m in marks.items() if m.phase is Phase.DONE}
    done |= {a.node for a in actions if a.step is Step.UNCORDON}
    if pool and len(done) >= len(pool):
        return model.RolloutState.COMPLETED
    if spec.control is model.Control.ABORT:
        return model.RolloutState.ABORTED
    if spec.control is model.Control.PAUSE:
        return model.RolloutState.PAUSED
    return model.RolloutState.RUNNING

