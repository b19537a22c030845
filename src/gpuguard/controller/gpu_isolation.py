"""The GPU-isolation step of a tick: apply, re-apply and undo the mechanisms that keep
isolated GPUs out (``policy.gpu_enforcement`` decides; this runs the pinned isolation Job and
writes the node's marks and label).

For each node serving with isolated GPUs: start the Job its plan names (named by what it
applies, on which boot — a crash between creating it and reading it finds the same Job), and
once it ended, write the marks (annotation and device-plugin label, one merge patch each) and
an Event. A Job that failed, or whose report shows a GPU not held, isolates the node instead:
a GPU gpuguard cannot keep out must not keep serving next to jobs. Writes are re-checked
against leadership and skipped in dry-run, like every other step.

Opt-in (``gpu_isolation.evict_pods``): once a GPU is held on the node's boot, the pods on it are
evicted through the Eviction API, once per isolation (``policy/gpu_pods.py``); a
PodDisruptionBudget that refuses (429) is asked again next tick, never overridden.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from gpuguard.actuators import eviction
from gpuguard.actuators import jobs as job_specs
from gpuguard.actuators import ledger as ledger_store
from gpuguard.catalog import xid as xid_catalog
from gpuguard.controller.dra_taints import DraTaints
from gpuguard.errors import GpuguardError
from gpuguard.model import (
    annotation_keys,
    decisions,
    faults,
    fleet,
    gpu_isolation,
    ports,
    timestamps,
)
from gpuguard.model import jobs as job_model
from gpuguard.model import settings as settings_model
from gpuguard.policy import gpu_enforcement as policy
from gpuguard.policy import gpu_pods

log = logging.getLogger(__name__)
Step = policy.Step


class Marker(Protocol):
    def mark(
        self,
        node: fleet.Node,
        annotations: dict[str, str | None],
        labels: dict[str, str | None],
    ) -> None:
        """Merge annotations and labels in one write (None removes one); ConflictError when
        the node changed."""
        ...


class Evictor(Protocol):
    def evict(self, pod_namespace: str, name: str) -> eviction.Evicted:
        """Ask the Eviction API to evict the pod: evicted, blocked (429) or gone (404)."""
        ...


@dataclass(frozen=True, slots=True)
class Outcome:
    node: str
    step: Step
    detail: str
    action: decisions.Action | None = None  # what was written, if anything
    overdue: tuple[gpu_isolation.IsolatedGpu, ...] = ()  # cards past the RMA deadline


@dataclass
class GpuIsolation:
    jobs: ports.JobsPort
    ledger: ports.LedgerPort[ledger_store.LedgerRead]
    writer: ports.ClusterWriter
    marker: Marker
    catalog: xid_catalog.XidCatalog
    image: str
    namespace: str = "gpuguard"
    rma_deadline: timedelta = timedelta(days=14)
    runtime_class: str | None = "nvidia"
    burnin_deadline: timedelta = settings_model.DEFAULT_BURNIN_DEADLINE
    evictor: Evictor | None = None  # None: the pods on an isolated GPU are left running
    dra: DraTaints | None = None  # the DRA route's DeviceTaintRules (None: not applied)
    xid_overrides: bool = False  # controller.xid_overrides is set: the Job reads the same file

    def run(
        self, snapshot: fleet.FleetSnapshot, *, may_write: Callable[[], bool]
    ) -> list[Outcome]:
        out = [Outcome(t.node, Step.HELD, t.detail, t.action)
               for t in (self.dra.run(snapshot, may_write) if self.dra else ())]
        nodes = [n for n in snapshot.nodes if gpu_isolation.KEY in n.annotations]
        if not nodes:
            return out
        entries = self._ledger()
        for node in nodes:
            plan = policy.plan(node, entries, snapshot.pods_on(node.name))
            if plan is None:
                continue
            if plan.step in (Step.HELD, Step.WAIT) or not may_write():
                drafted = self._draft(node, entries, snapshot.taken_at) if may_write() else None
                out.append(drafted or Outcome(node.name, plan.step, plan.detail))
                if drafted is None and plan.step is Step.HELD and may_write():
                    out.extend(self._evict(node, snapshot))
                continue
            if plan.step is Step.RECORD:
                outcome = self._record(node, plan)
            else:
                outcome = self._run_job(node, plan, snapshot.taken_at)
            if outcome is not None:
                out.append(outcome)
        return [self._overdue(o, snapshot) for o in out]

    def _overdue(self, outcome: Outcome, snapshot: fleet.FleetSnapshot) -> Outcome:
        node = snapshot.node(outcome.node)
        late = policy.overdue(node, snapshot.taken_at, self.rma_deadline) if node else ()
        return replace(outcome, overdue=late)

    def _ledger(self) -> list[faults.LedgerEntry] | None:
        """Read once a tick where GPUs are isolated: for returns and the drafted requests."""
        try:
            return self.ledger.entries().entries
        except GpuguardError as e:
            log.warning("GPU returns and requests wait: the ledger cannot be read: %s", e)
            return None

    def _draft(
        self, node: fleet.Node, ledger: list[faults.LedgerEntry] | None, now: datetime
    ) -> Outcome | None:
        """Write the drafted request when the cards' history changed it (a first isolation, a
        later fault raising the escalation), with an Event."""
        if ledger is None:
            return None
        text = policy.request(node, ledger, self.catalog)
        if node.marks.gpu_request == text:
            return None
        action = decisions.Action(
            kind=decisions.ActionKind.ANNOTATE,
            node=node.name,
            reason=decisions.Reason.ESCALATED,
            annotations={annotation_keys.GPU_REQUEST: text},
            detail=text,
        )
        try:
            self.marker.mark(node, {annotation_keys.GPU_REQUEST: text}, {})
        except GpuguardError as e:
            log.warning("%s: GPU request not written (next tick retries): %s", node.name, e)
            return None
        self._event(action, now)
        return Outcome(node.name, Step.HELD, text, action)

    def _evict(self, node: fleet.Node, snapshot: fleet.FleetSnapshot) -> list[Outcome]:
        """Evict the pods on the node's held GPUs; mark each GPU done when none is left that
        a PodDisruptionBudget holds (those are asked again next tick)."""
        if self.evictor is None:
            return []
        done, said = [], []
        pods = snapshot.pods_on(node.name)
        for due in gpu_pods.evictions(node, pods, snapshot.samples):
            results = {f"{p.namespace}/{p.name}": self._evict_one(p) for p in due.pods}
            evicted = [p for p, r in results.items() if r is eviction.Evicted.EVICTED]
            waiting = [p for p, r in results.items() if r is None or r is eviction.Evicted.BLOCKED]
            if not waiting:
                done.append(due.uuid)
            if evicted or waiting:
                said.append(_eviction_detail(due, evicted, waiting))
        if not done and not said:
            return []
        detail = "; ".join(said) or "no pods left on the isolated GPUs"
        if done:
            try:
                value = gpu_pods.marked_evicted(node, done)
                self.marker.mark(node, {gpu_isolation.KEY: value}, {})
            except GpuguardError as e:
                log.warning("%s: eviction not recorded (next tick evicts again): %s", node.name, e)
        action = decisions.Action(
            kind=decisions.ActionKind.ANNOTATE, node=node.name,
            reason=decisions.Reason.GPU_PODS_EVICTED, detail=detail,
        )
        if said:
            self._event(action, snapshot.taken_at)
        return [Outcome(node.name, Step.HELD, detail, action if said else None)]

    def _evict_one(self, pod: fleet.Pod) -> eviction.Evicted | None:
        assert self.evictor is not None
        try:
            return self.evictor.evict(pod.namespace, pod.name)
        except GpuguardError as e:
            log.warning("%s/%s: eviction failed (next tick retries): %s", pod.namespace,
                        pod.name, e)
            return None

    def _record(self, node: fleet.Node, plan: policy.Plan) -> Outcome | None:
        try:
            self.marker.mark(node, policy.record(node, plan), {})
        except GpuguardError as e:
            log.warning("%s: device-plugin pod not recorded (next tick retries): %s", node.name, e)
            return None
        return Outcome(node.name, plan.step, f"device plugin {plan.plugin}: {plan.detail}")

    def _manifest(self, node: fleet.Node, plan: policy.Plan) -> dict[str, Any]:
        if plan.step is Step.BURNIN:
            (uuid,) = plan.uuids
            return job_specs.burnin_job(
                node.name, plan.key, node.boot_id, gpus=1, mode="matmul", image=self.image,
                namespace=self.namespace, runtime_class=self.runtime_class, uuid=uuid,
                deadline=self.burnin_deadline,
            )
        action = "apply" if plan.step is Step.APPLY else "undo"
        return job_specs.gpu_isolation_job(
            node.name, plan.key, action=action, uuids=plan.uuids, image=self.image,
            namespace=self.namespace, runtime_class=self.runtime_class,
            xid_overrides=self.xid_overrides,
        )

    def _run_job(self, node: fleet.Node, plan: policy.Plan, now: datetime) -> Outcome | None:
        manifest = self._manifest(node, plan)
        name = manifest["metadata"]["name"]
        try:
            result = self.jobs.result(name)
            if result.state is job_model.JobState.ABSENT:
                self.jobs.create(manifest)
                log.info("%s: GPU isolation Job %s started (%s)", node.name, name, plan.detail)
                return Outcome(node.name, plan.step, f"Job {name} started: {plan.detail}")
        except GpuguardError as e:
            log.warning("%s: GPU isolation Job %s: %s (next tick retries)", node.name, name, e)
            return None
        if result.state is job_model.JobState.RUNNING:
            return Outcome(node.name, plan.step, f"Job {name} running")
        return self._finish(node, plan, result, now)

    def _finish(
        self, node: fleet.Node, plan: policy.Plan, result: job_model.JobResult, now: datetime
    ) -> Outcome | None:
        if plan.step is Step.APPLY:
            applied = policy.after_apply(node, plan, result.message, now)
        elif plan.step is Step.BURNIN:
            succeeded = result.state is job_model.JobState.SUCCEEDED
            applied = policy.after_burnin(node, plan, succeeded, result.message)
        else:
            applied = policy.after_return(node, plan, result.message)
        if not applied.ok:
            return self._failed(node, plan, applied.detail or result.detail, now)
        reason = applied.reason or _reason(plan)
        action = decisions.Action(
            kind=decisions.ActionKind.ANNOTATE,
            node=node.name,
            reason=reason,
            annotations={k: v for k, v in applied.annotations.items() if v is not None},
            detail=applied.detail,
        )
        try:
            self.marker.mark(node, dict(applied.annotations), dict(applied.labels))
        except GpuguardError as e:
            log.warning("%s: GPU isolation marks not written (next tick retries): %s", node.name, e)
            return None
        self._event(action, now)
        return Outcome(node.name, plan.step, applied.detail, action)

    def _failed(
        self, node: fleet.Node, plan: policy.Plan, detail: str, now: datetime
    ) -> Outcome | None:
        if plan.step is Step.RETURN:
            log.warning("%s: GPU return failed, the GPUs stay out: %s", node.name, detail)
            return Outcome(node.name, plan.step, f"return failed: {detail}")
        action = policy.failed_cordon(node, detail, timestamps.format_utc(now))
        try:
            self.writer.isolate(node, action)
        except GpuguardError as e:
            log.error("%s: GPU isolation failed and the node could not be isolated: %s",
                      node.name, e)
            return None
        self._event(action, now)
        return Outcome(node.name, plan.step, action.detail, action)

    def _event(self, action: decisions.Action, now: datetime) -> None:
        try:
            self.writer.record_event(action, now)
        except GpuguardError as e:
            log.warning("%s: %s, but the Event could not be recorded: %s",
                        action.node, action.reason, e)


def _eviction_detail(due: gpu_pods.Eviction, evicted: list[str], waiting: list[str]) -> str:
    text = f"GPU {due.index} ({due.uuid}) is isolated and gpu_isolation.evict_pods is on"
    if evicted:
        text += f": evicted the pods on it ({due.source}): {', '.join(evicted)}"
    if waiting:
        text += f"; not evicted yet (a PodDisruptionBudget or the API refused, next tick " \
                f"asks again): {', '.join(waiting)}"
    return text


def _reason(plan: policy.Plan) -> decisions.Reason:
    if plan.step is Step.RETURN:
        return decisions.Reason.GPU_RETURNED
    if plan.detail.startswith("not applied yet"):
        return decisions.Reason.GPU_ISOLATION_APPLIED
    return decisions.Reason.GPU_ISOLATION_REAPPLIED
