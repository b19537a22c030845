"""The change-rollout step of a tick: for each declared change, gather the nodes' facts, let
``policy.rollout`` plan, and apply its writes (docs/change-management.md).

Facts: the tick's snapshot (nodes, GPU pods, the kernel from ``nodeInfo``, the driver from
gpu-feature-discovery's label), the agent's conformance statuses (the same
``gpuguard_check_status`` series the return checks read), kured's lock and, for a node in its
burn-in, the burn-in Job (the one the return to pool runs, ``actuators.jobs.burnin_job``,
named by the change and the boot it tests); for a change applied by a Job (method job), that
Job (built from the cluster admin's approved template, ``actuators.jobs.change_job``): its
success is the change applied, its failure stops the rollout. Writes: those Jobs
(create-if-absent), one merge patch per node, conditional on its ``resourceVersion`` (a 409
leaves the node for the next tick), re-checked against leadership and skipped in dry-run; an
Event for each. Nothing is stored but the nodes' ``gpuguard.io/change`` marks: a restarted
controller or a new leader plans the same rollout from the cluster alone.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from gpuguard.actuators import eviction
from gpuguard.actuators import jobs as job_specs
from gpuguard.controller import return_to_pool as return_step
from gpuguard.errors import ConflictError, GpuguardError, InputError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import change, decisions, fleet, ports, settings
from gpuguard.model import jobs as job_model
from gpuguard.model.node_marks import Isolation
from gpuguard.policy import rollout, xid_signals
from gpuguard.sources import changes as change_source
from gpuguard.sources import return_facts

log = logging.getLogger(__name__)


class ChangeSource(Protocol):
    def changes(self) -> tuple[change_source.Declared, ...]: ...


class LockSource(Protocol):
    def lock(self, kured_namespace: str, name: str) -> str | None: ...


class ChangeWriter(Protocol):
    def set_schedulable(
        self, node: fleet.Node, annotations: dict[str, str | None], unschedulable: bool | None
    ) -> None: ...

    def record_event(self, action: decisions.Action, now: datetime) -> None: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """One change's plan and what became of each write (``applied``, ``dry-run``,
    ``conflict``, ``error: ...``); ``error``: the change could not be planned."""

    name: str
    plan: rollout.Plan | None = None
    done: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None


class TemplateSource(Protocol):
    def templates(self) -> dict[str, str]: ...


class EvictionPort(Protocol):
    def evict(self, pod_namespace: str, name: str) -> eviction.Evicted: ...


@dataclass
class Changes:
    """The rollout step's ports; ``jobs``, ``image``, ``namespace`` and ``runtime_class``:
    where and how the burn-in Job runs (as for the return to pool); ``templates``: the admin's
    change Job templates (method job)."""

    source: ChangeSource
    writer: ChangeWriter
    checks: ports.MetricsSource
    jobs: ports.JobsPort
    image: str
    kured: LockSource | None = None
    notifier: ports.Notifier | None = None  # a stopped rollout is told to people
    namespace: str = "gpuguard"
    runtime_class: str | None = None
    templates: TemplateSource | None = None
    evictions: EvictionPort | None = None  # a change's opt-in drain window
    limits: settings.ChangeLimitSettings = field(default_factory=settings.ChangeLimitSettings)
    burnin_deadline: timedelta = settings.DEFAULT_BURNIN_DEADLINE

    def run(
        self,
        snapshot: fleet.FleetSnapshot,
        now: datetime,
        *,
        may_write: Callable[[], bool],
    ) -> list[Outcome]:
        out = []
        declared = self.source.changes()
        samples: tuple[fleet.MetricSample, ...] | None = None
        for declared_item in declared:
            item = self._bounded(declared_item)
            if item.spec is None:
                out.append(Outcome(item.name, error=item.error))
                continue
            if samples is None:
                samples = self._samples(now)
            try:
                holder = self._kured(item.spec, now)
            except GpuguardError as e:
                out.append(Outcome(item.name, error=f"kured's lock unreadable: {e}"))
                continue
            facts = self._burnins(item.spec, node_facts(snapshot, samples), now)
            facts = self._change_jobs(item.spec, facts)
            plan = rollout.plan(item.spec, facts, now, kured_holder=holder)
            out.append(Outcome(item.name, plan,
                               self._apply(snapshot, item.spec, plan, now, may_write)))
        return out

    def _bounded(self, item: change_source.Declared) -> change_source.Declared:
        """The change within the admin's ceiling (``changes`` settings), said once a tick."""
        if item.spec is None:
            return item
        spec = rollout.bounded(item.spec, self.limits)
        if spec != item.spec:
            log.info("change %s: bounded by the admin's ceiling to max_unavailable %d, "
                     "min_available %s (settings: changes)", item.name, spec.max_unavailable,
                     spec.min_available)
        return dataclasses.replace(item, spec=spec)

    def _samples(self, now: datetime) -> tuple[fleet.MetricSample, ...]:
        """The agents' statuses; unreadable: none (every check UNKNOWN: nothing returns)."""
        try:
            return self.checks.samples(now)
        except GpuguardError as e:
            log.warning("change rollout: conformance unreadable, nothing verified: %s", e)
            return ()

    def _burnins(self, spec: change.ChangeSpec, facts: list[rollout.NodeFacts],
                  now: datetime) -> list[rollout.NodeFacts]:
        """Each node in this change's burn-in with its burn-in Job's result (unreadable:
        None, and the policy waits)."""
        out = []
        for f in facts:
            mark = _mark(f.node)
            if (spec.burnin is not None and mark is not None and mark.change == spec.name
                    and mark.phase is change.Phase.BURN_IN):
                name = job_specs.change_burnin_name(f.node.name, spec.name, mark.boot,
                                                    str(spec.burnin))
                try:
                    job = self.jobs.result(name)
                except GpuguardError as e:
                    log.warning("%s: burn-in Job %s unreadable: %s", f.node.name, name, e)
                    job = job_model.JobResult(job_model.JobState.RUNNING)
                result = return_step.burnin_result(job, spec.burnin, mark.boot, now)
                out.append(dataclasses.replace(f, burnin=result))
                continue
            out.append(f)
        return out

    def _change_jobs(self, spec: change.ChangeSpec,
                     facts: list[rollout.NodeFacts]) -> list[rollout.NodeFacts]:
        """Method job: each node whose change was requested with its Job's outcome (succeeded:
        applied; failed: the rollout stops; unreadable: not applied yet)."""
        if spec.method is not change.Method.JOB:
            return facts
        out = []
        for f in facts:
            mark = _mark(f.node)
            if mark is None or mark.change != spec.name or mark.phase is not change.Phase.APPLYING:
                out.append(f)
                continue
            name = job_specs.change_job_name(f.node.name, spec.name, mark.boot)
            try:
                job = self.jobs.result(name)
            except GpuguardError as e:
                log.warning("%s: change Job %s unreadable: %s", f.node.name, name, e)
                job = job_model.JobResult(job_model.JobState.RUNNING)
            failed = (f"Job {name} {job.detail or 'failed'}" if job.state is
                      job_model.JobState.FAILED else None)
            out.append(dataclasses.replace(f, applied=job.state is job_model.JobState.SUCCEEDED,
                                           apply_failed=failed))
        return out

    def _start_change_job(self, node: fleet.Node, spec: change.ChangeSpec,
                          action: rollout.NodeAction) -> None:
        """The change's Job from the admin's template, for the boot it is requested on."""
        if not action.change_job or spec.job_template is None:
            return
        try:
            template = change.job_template(
                self.templates.templates() if self.templates else {}, spec.job_template)
            env = {"GPUGUARD_CHANGE": spec.name, "GPUGUARD_DRIVER": spec.driver or "",
                   "GPUGUARD_KERNEL": spec.kernel or ""}
            mark = _mark(node)  # applying: the boot it was requested on; else this one
            boot = (mark.boot if mark is not None and mark.phase is change.Phase.APPLYING
                    else node.boot_id)
            manifest = job_specs.change_job(
                node.name, spec.name, boot, template,
                env={k: v for k, v in env.items() if v}, namespace=self.namespace,
                deadline_s=int(spec.apply_timeout.total_seconds()))
            if self.jobs.create(manifest):
                log.info("%s: change %s: Job %s created from template %s", node.name,
                         spec.name, manifest["metadata"]["name"], template.name)
        except GpuguardError as e:
            log.warning("%s: change %s: its Job not created (next tick retries): %s",
                        node.name, spec.name, e)

    def _drain(self, snapshot: fleet.FleetSnapshot, name: str, node: str) -> str:
        """Evict the node's running GPU pods (the drain window passed); what became of them."""
        if self.evictions is None:
            return "no eviction port: waits"
        pods = [p for p in snapshot.pods if p.node == node and p.gpu_request > 0
                and p.phase is fleet.PodPhase.RUNNING]
        refused = []
        for pod in pods:
            try:
                if self.evictions.evict(pod.namespace, pod.name) is eviction.Evicted.BLOCKED:
                    refused.append(pod.name)
            except GpuguardError as e:
                log.warning("%s: change %s: evicting %s/%s failed: %s", node, name,
                            pod.namespace, pod.name, e)
                refused.append(pod.name)
        log.info("%s: change %s: drain window passed: %d GPU pod(s) evicted, %d refused",
                 node, name, len(pods) - len(refused), len(refused))
        return f"evicted {len(pods) - len(refused)}" + (
            f", refused (PodDisruptionBudget or error): {', '.join(refused)}" if refused else "")

    def _start_burnin(self, node: fleet.Node, plan: rollout.Plan,
                       action: rollout.NodeAction) -> None:
        """The burn-in Job for the boot the node is verified on (create-if-absent)."""
        if action.burnin is None:
            return
        manifest = job_specs.change_burnin_job(
            node.name, plan.change, node.boot_id, gpus=node.gpu_capacity,
            mode=str(action.burnin), image=self.image, namespace=self.namespace,
            runtime_class=self.runtime_class, deadline=self.burnin_deadline,
        )  # fmt: skip
        try:
            if self.jobs.create(manifest):
                log.info("%s: change %s: burn-in Job %s created", node.name, plan.change,
                         manifest["metadata"]["name"])
        except GpuguardError as e:
            log.warning("%s: change %s: burn-in Job not created (next tick retries): %s",
                        node.name, plan.change, e)

    def _kured(self, spec: change.ChangeSpec, now: datetime) -> str | None:
        if self.kured is None or spec.kured is None:
            return None
        return change.kured_holder(self.kured.lock(*spec.kured), now)

    def _apply(
        self,
        snapshot: fleet.FleetSnapshot,
        spec: change.ChangeSpec,
        plan: rollout.Plan,
        now: datetime,
        may_write: Callable[[], bool],
    ) -> dict[str, str]:
        done: dict[str, str] = {}
        for action in plan.actions:
            node = snapshot.node(action.node)
            acts = action.burnin is not None or action.change_job or action.evict
            if (action.step not in rollout.WRITES and not acts) or node is None:
                continue
            if not may_write():
                done[action.node] = "dry-run"
                continue
            if action.evict:
                done[action.node] = self._drain(snapshot, plan.change, action.node)
                continue
            self._start_burnin(node, plan, action)
            self._start_change_job(node, spec, action)
            if action.step not in rollout.WRITES:
                continue
            try:
                self.writer.set_schedulable(node, dict(action.annotations), action.cordon)
            except ConflictError:
                done[action.node] = "conflict"
                continue
            except GpuguardError as e:
                log.warning("%s: change %s: %s not written: %s", node.name, plan.change,
                            action.step, e)
                done[action.node] = f"error: {e}"
                continue
            done[action.node] = "applied"
            log.info("change %s: %s %s: %s", plan.change, action.step, node.name, action.reason)
            self._event(plan.change, action, now)
        return done

    def _event(self, name: str, action: rollout.NodeAction, now: datetime) -> None:
        reason = (decisions.Reason.CHANGE_FAILED if action.step is rollout.Step.FAIL
                  else decisions.Reason.CHANGE_STEP)
        event = decisions.Action(
            kind=decisions.ActionKind.ANNOTATE, node=action.node, reason=reason,
            detail=f"change {name}: {action.step}: {action.reason}",
        )  # fmt: skip
        try:
            self.writer.record_event(event, now)
        except GpuguardError as e:
            log.warning("%s: change %s Event not recorded: %s", action.node, name, e)
        if action.step is rollout.Step.FAIL and self.notifier is not None:
            try:
                self.notifier.notify(event, now)
            except GpuguardError as e:
                log.warning("%s: change %s stopped, but the notification failed: %s",
                            action.node, name, e)


def gpu_pods(pods: Sequence[fleet.Pod], node: str) -> int:
    """Running pods holding GPUs on the node (the rollout never evicts them)."""
    return sum(1 for p in pods if p.node == node and p.phase is fleet.PodPhase.RUNNING
               and p.gpu_request > 0)


KUBE_PROXY = "kube-proxy"


def kube_proxy(pods: Sequence[fleet.Pod], node: str) -> dict[str, decisions.CheckStatus]:
    """kube-proxy's pod on the node as a check (none found: not reported, the cluster may
    run another service proxy): a node whose ip_vs did not load has it not Ready."""
    found = [p for p in pods if p.node == node and p.name.startswith(KUBE_PROXY)]
    if not found:
        return {}
    ready = all(p.phase is fleet.PodPhase.RUNNING and p.ready for p in found)
    return {KUBE_PROXY: decisions.CheckStatus.PASS if ready else decisions.CheckStatus.FAIL}


def node_facts(
    snapshot: fleet.FleetSnapshot, samples: Sequence[fleet.MetricSample]
) -> list[rollout.NodeFacts]:
    by_node: dict[str, list[fleet.MetricSample]] = {}
    for s in samples:
        name = xid_signals.node_of(s.labels)
        if name is not None:
            by_node.setdefault(name, []).append(s)
    return [
        rollout.NodeFacts(
            node=n,
            gpu_pods=gpu_pods(snapshot.pods, n.name),
            checks={**return_facts.conformance(by_node.get(n.name, ())),
                    **kube_proxy(snapshot.pods, n.name)},
            kernel=n.kernel_version or None,
            driver=change.driver_version(n),
            applied=_applied(n),
        )
        for n in snapshot.nodes
    ]


def _mark(node: fleet.Node) -> change.NodeMark | None:
    try:
        return change.read_mark(node)
    except InputError:
        return None  # the policy reports it and skips the node


def _applied(node: fleet.Node) -> bool:
    """The applying tool marked the change it was asked for as done."""
    requested = node.annotations.get(keys.CHANGE_REQUESTED)
    return requested is not None and node.annotations.get(keys.CHANGE_APPLIED) == requested


def as_json(outcomes: Sequence[Outcome], origin: datetime | None = None) -> list[dict[str, Any]]:
    """The rollouts as the demo and ``gpuguard change status -o json`` print them."""
    out: list[dict[str, Any]] = []
    for o in outcomes:
        if o.plan is None:
            out.append({"name": o.name, "state": "invalid", "error": o.error})
            continue
        plan = o.plan
        stopped = ({"node": plan.stopped_by[0], "check": plan.stopped_by[1]}
                   if plan.stopped_by else None)
        out.append({
            "name": plan.change, "state": str(plan.state), "pool": plan.pool, "out": plan.out,
            "waves": [{"nodes": list(w.nodes), "size": w.size, "result": w.result}
                      for w in plan.waves],
            "stopped_by": stopped,
        })
    return out



def explain(node: fleet.Node | None, outcomes: Sequence[Outcome]) -> dict[str, Any] | None:
    """For ``gpuguard explain``: the node's place in each rollout with the reason, and whether
    the GPU Operator's upgrade controller counts it as unavailable because gpuguard cordoned
    it (it counts cordoned nodes against its ``maxUnavailable``). None: nothing to say."""
    if node is None:
        return None
    rows = [
        {"change": o.name, "step": str(a.step), "wave": None if a.wave is None else a.wave + 1,
         "reason": a.reason, "evidence": list(a.evidence)}
        for o in outcomes if o.plan is not None and (a := o.plan.action_for(node.name))
    ]
    held_by = ("a fault isolation" if node.marks.isolation is not Isolation.NONE
               else "a change" if change.out_for_change(node) else None)
    operator = (f"cordoned by gpuguard ({held_by}): the GPU Operator's upgrade controller "
                "counts this node against its maxUnavailable" if node.unschedulable and held_by
                else None)
    if not rows and operator is None and keys.CHANGE not in node.annotations:
        return None
    return {"rollout": rows, "mark": node.annotations.get(keys.CHANGE), "gpu_operator": operator}
