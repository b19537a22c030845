"""The remediation step of a tick: gpuguard's own repair of a node after a ``power-cycle``
verdict, opt-in per pool (docs/remediation.md); ``policy.remediation`` decides, this applies.

- ``drain``: evict the node's GPU pods through the Eviction API (a PodDisruptionBudget's 429
  leaves the pod; the next tick tries again; nothing is ever forced or deleted);
- ``power-cycle``: the BMC (``ports.PowerControl``, Redfish in ``actuators.redfish``) powers
  the node off, then on: the ``gpuguard.io/remediation`` mark ``started`` before (a claim,
  conditional on the node as read), then with the result, an Event
  and, on a failure, the reason put at the head of the person's request
  (``gpuguard.io/request``) and a notification. The mark is written whatever the result: a
  node is repaired at most once per isolation, so a refusing BMC never loops. The return
  checks (a new boot ID) and the burn-in then decide as after a person's power cycle;
- ``hand-off``: the mark and the node condition ``GpuguardRemediationRequired`` the cluster's
  own remediator reads (``HandOffWriter``); gpuguard itself does nothing more on the node;
- ``gpu-reset``: the mark ``started`` naming the reset Job (a claim, as above), then the
  pinned Job ``nvidia-smi -r -i <uuid>`` (``actuators.jobs.gpu_reset_job``);
  ``gpu-reset-result``: its Job read on later ticks — Complete: the mark ``done`` (the return
  checks take it as the reset, the burn-in decides); Failed (its exit status, its deadline),
  gone, or not the Job gpuguard created: ``failed``, the reason at the head of the person's
  request and a notification. Both with an Event and a ledger line, never a second reset;
- ``wait``: nothing written (the breaker's turn; ``gpuguard explain`` shows it).

Writes are re-checked against leadership and skipped in dry-run; a failed write is logged
and the next tick retries (a power cycle whose mark could not be written is seen next tick
by its new boot ID: the policy does not power-cycle a node rebooted since its isolation).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from gpuguard.actuators import eviction, jobs
from gpuguard.errors import GpuguardError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions, faults, fleet, pci, ports
from gpuguard.model import jobs as job_model
from gpuguard.model import remediation as model
from gpuguard.model import settings as settings_model
from gpuguard.policy import remediation as policy

log = logging.getLogger(__name__)
Step = policy.Step
CONDITION = model.HAND_OFF_CONDITION


class Evictor(Protocol):
    def evict(self, pod_namespace: str, name: str) -> eviction.Evicted: ...


class MarkWriter(ports.ClusterWriter, Protocol):
    def annotate_after_claim(self, node: str, annotations: dict[str, str | None]) -> None:
        """Annotations without a precondition, after a conditional claim."""
        ...


class HandOffWriter(Protocol):
    def set_condition(self, node: str, condition: str, status: bool, reason: str,
                      message: str, now: datetime) -> None:  # fmt: skip
        """Set the node condition ``condition`` (True/False) with reason and message."""
        ...


class ResetJobs(Protocol):
    """Creates the reset Job (its uid; None: it already existed) and reads its result."""

    def create(self, manifest: dict[str, Any]) -> str | None: ...

    def result(self, name: str, created_uid: str | None = None) -> job_model.JobResult: ...


@dataclass(frozen=True, slots=True)
class ResetJob:
    """How the GPU-reset Job is made: gpuguard's image, namespace and the NVIDIA RuntimeClass
    (the same as its other Jobs: the admission policy pins them)."""

    image: str
    namespace: str = "gpuguard"
    runtime_class: str | None = "nvidia"


@dataclass(frozen=True, slots=True)
class Outcome:
    """One node's decision and what became of it: ``applied``, ``dry-run``, ``error: ...``
    or ``-`` (nothing to write); ``result`` is the mark written, if any."""

    decision: policy.Decision
    done: str
    result: model.Mark | None = None


@dataclass
class Remediation:
    power: ports.PowerControl
    evictor: Evictor
    writer: MarkWriter
    settings: settings_model.RemediationSettings
    hand_off: HandOffWriter | None = None
    notifier: ports.Notifier | None = None
    ledger: ports.LedgerWriter | None = None  # the power cycle's line on the card's history
    reset_jobs: ResetJobs | None = None  # the GPU reset (remediation.gpu_reset_pools)
    reset_job: ResetJob | None = None
    cards: Callable[[fleet.FleetSnapshot], Mapping[str, model.CardFacts]] | None = None
    """The isolated cards' row-remap and process facts (None: unknown, no GPU reset)."""

    def run(
        self, snapshot: fleet.FleetSnapshot, now: datetime, *, may_write: Callable[[], bool]
    ) -> list[Outcome]:
        out = []
        cards = self.cards(snapshot) if self.cards is not None else None
        for decision in policy.decide(snapshot, self.settings, cards):
            node = snapshot.node(decision.node)
            if node is None or decision.step in (Step.NONE, Step.WAIT):
                out.append(Outcome(decision, "-"))
            elif not may_write():
                out.append(Outcome(decision, "dry-run"))
            else:
                out.append(self._apply(node, decision, now))
        return out

    def _apply(self, node: fleet.Node, decision: policy.Decision, now: datetime) -> Outcome:
        try:
            match decision.step:
                case Step.DRAIN:
                    return Outcome(decision, self._drain(node, decision, now))
                case Step.POWER_CYCLE:
                    return self._power_cycle(node, decision, now)
                case Step.HAND_OFF:
                    return self._hand_off(node, decision, now)
                case Step.GPU_RESET:
                    return self._gpu_reset(node, decision, now)
                case Step.GPU_RESET_RESULT:
                    return self._gpu_reset_result(node, decision, now)
                case Step.CLEAR_HAND_OFF if self.hand_off is not None:
                    self.hand_off.set_condition(node.name, CONDITION, False, "Returned",
                                                decision.detail, now)  # fmt: skip
                    return Outcome(decision, "applied")
        except GpuguardError as e:
            log.warning("%s: %s not applied (next tick retries): %s", node.name, decision.step, e)
            return Outcome(decision, f"error: {e}")
        return Outcome(decision, "-")

    def _drain(self, node: fleet.Node, decision: policy.Decision, now: datetime) -> str:
        evicted, refused = [], []
        for pod in decision.pods:
            try:
                if self.evictor.evict(pod.namespace, pod.name) is eviction.Evicted.BLOCKED:
                    refused.append(pod.name)
                else:
                    evicted.append(pod.name)
            except GpuguardError as e:
                log.warning("%s: evicting %s/%s failed: %s", node.name, pod.namespace, pod.name, e)
                refused.append(pod.name)
        detail = f"before its power cycle: evicted {', '.join(evicted) or 'none'}" + (
            f"; refused (PodDisruptionBudget or error), retried next tick: {', '.join(refused)}"
            if refused else "")  # fmt: skip
        if evicted:
            self._tell(node.name, decisions.Reason.REMEDIATION_DRAINING, detail, now)
        return "applied"

    def _power_cycle(self, node: fleet.Node, decision: policy.Decision, now: datetime) -> Outcome:
        isolated_at = node.marks.isolated_at or ""
        started = model.Mark(model.Action.POWER_CYCLE, model.Result.STARTED, now, isolated_at,
                             "power cycle requested from the BMC")  # fmt: skip
        # claimed first, conditional on the node as read (a 409: nothing done, next tick)
        self.writer.annotate(node, {keys.REMEDIATION: started.render()})
        done = self.power.power_cycle(node.name, policy.pool_of(node, self.settings))
        result = model.Result.DONE if done.ok else model.Result.FAILED
        mark = dataclasses.replace(started, result=result, detail=done.detail)
        marks = {keys.REMEDIATION: mark.render()}
        if not done.ok:
            request = node.marks.request or ""
            marks[keys.REQUEST] = (f"automated power cycle failed ({done.detail}): power-cycle "
                                   f"the node by hand. {request}").strip()  # fmt: skip
        log.info("%s: power cycle %s: %s", node.name, result, done.detail)
        self._record(node, done.ok, now)
        # the node changed since the claim (our mark, the kubelet's NotReady): the result is
        # written unconditionally, over gpuguard's own keys only (a merge patch)
        self.writer.annotate_after_claim(node.name, dict(marks))
        if done.ok:
            why = f"power-cycled through its BMC ({done.detail}): the return checks decide"
            self._tell(node.name, decisions.Reason.REMEDIATION_DONE, why, now)
        else:
            why = f"automated power cycle failed: {done.detail}; the person's request says so"
            self._tell(node.name, decisions.Reason.REMEDIATION_FAILED, why, now, notify=True)
        return Outcome(decision, "applied", mark)

    def _gpu_reset(self, node: fleet.Node, decision: policy.Decision, now: datetime) -> Outcome:
        if self.reset_jobs is None or self.reset_job is None:
            return Outcome(decision, "error: no Job client for the GPU reset")
        isolated_at, uuid = node.marks.isolated_at or "", node.marks.gpu_uuid or ""
        made = self.reset_job
        manifest = jobs.gpu_reset_job(node.name, isolated_at, uuid=uuid, image=made.image,
                                      namespace=made.namespace,
                                      runtime_class=made.runtime_class)  # fmt: skip
        name = manifest["metadata"]["name"]
        started = model.Mark(model.Action.GPU_RESET, model.Result.STARTED, now, isolated_at,
                             f"nvidia-smi -r -i {uuid} by Job {name}", job=f"{name}=")
        # claimed first, conditional on the node as read (a 409: nothing created)
        self.writer.annotate(node, {keys.REMEDIATION: started.render()})
        uid = self.reset_jobs.create(manifest) or ""  # "" : it existed, not gpuguard's
        mark = dataclasses.replace(started, job=f"{name}={uid}")
        self.writer.annotate_after_claim(node.name, {keys.REMEDIATION: mark.render()})
        log.info("%s: GPU reset of %s: Job %s created (uid %s)", node.name, uuid, name, uid)
        self._tell(node.name, decisions.Reason.REMEDIATION_STARTED,
                   f"{decision.detail}: Job {name} resets {uuid}", now)  # fmt: skip
        return Outcome(decision, "applied", mark)

    def _gpu_reset_result(
        self, node: fleet.Node, decision: policy.Decision, now: datetime
    ) -> Outcome:
        if self.reset_jobs is None:
            return Outcome(decision, "error: no Job client for the GPU reset")
        started = node.marks.remediation
        if started is None:
            return Outcome(decision, "-")
        name, _, uid = started.job.partition("=")
        job = self.reset_jobs.result(name, created_uid=uid)
        if job.state is job_model.JobState.RUNNING:
            return Outcome(decision, "-")
        ok = job.state is job_model.JobState.SUCCEEDED
        why = {job_model.JobState.ABSENT: f"Job {name} is gone"}.get(job.state, job.detail)
        detail = f"{started.detail}: " + ("exit 0" if ok else f"failed ({why or 'no reason'})")
        mark = dataclasses.replace(started, at=now, detail=detail,
                                   result=model.Result.DONE if ok else model.Result.FAILED)
        marks: dict[str, str | None] = {keys.REMEDIATION: mark.render()}
        if not ok:
            request = node.marks.request or ""
            marks[keys.REQUEST] = (f"automated GPU reset failed ({detail}): reset the GPU by "
                                   f"hand. {request}").strip()  # fmt: skip
        self._record(node, ok, now, reset=True)
        self.writer.annotate(node, marks)
        if ok:
            self._tell(node.name, decisions.Reason.REMEDIATION_DONE,
                       f"GPU reset ({detail}): the return checks and the burn-in decide", now)
        else:
            self._tell(node.name, decisions.Reason.REMEDIATION_FAILED,
                       f"automated GPU reset failed: {detail}; the person's request says so",
                       now, notify=True)  # fmt: skip
        return Outcome(decision, "applied", mark)

    def _record(self, node: fleet.Node, ok: bool, now: datetime, *, reset: bool = False) -> None:
        """The repair on the ledger, as a line of the isolated card that is no fault of it
        (``faults.NOT_FAULTS``); an unwritable ledger is logged, the node's mark still tells."""
        if self.ledger is None:
            return
        kind = {(False, True): faults.FaultKind.POWER_CYCLED,
                (False, False): faults.FaultKind.POWER_CYCLE_FAILED,
                (True, True): faults.FaultKind.GPU_RESET,
                (True, False): faults.FaultKind.GPU_RESET_FAILED}[reset, ok]  # fmt: skip
        entry = faults.LedgerEntry(
            at=now, node=node.name, xid=None,
            pci=pci.try_normalize_pci(node.marks.gpu_pci),
            uuid=node.marks.gpu_uuid, recorder=faults.Recorder.GPUGUARD,
            kind=kind,
        )  # fmt: skip
        try:
            self.ledger.append(entry)
        except GpuguardError as e:
            log.warning("%s: %s not on the ledger: %s", node.name, kind, e)

    def _hand_off(self, node: fleet.Node, decision: policy.Decision, now: datetime) -> Outcome:
        if self.hand_off is None:
            return Outcome(decision, "error: no hand-off writer")
        isolated_at = node.marks.isolated_at or ""
        message = (f"gpuguard verdict power-cycle since {isolated_at}: "
                   f"{node.marks.reason or ''}")[:1024]  # fmt: skip
        started = model.Mark(model.Action.HAND_OFF, model.Result.STARTED, now, isolated_at,
                             f"setting node condition {CONDITION}=True")  # fmt: skip
        # claimed first, conditional on the node as read; the condition's write changes the
        # node, so the result is written after it without a precondition
        self.writer.annotate(node, {keys.REMEDIATION: started.render()})
        try:
            self.hand_off.set_condition(node.name, CONDITION, True, "PowerCycleRequired",
                                        message, now)  # fmt: skip
        except GpuguardError as e:
            failed = dataclasses.replace(started, result=model.Result.FAILED,
                                         detail=f"node condition not set: {e}")  # fmt: skip
            request = node.marks.request or ""
            self.writer.annotate_after_claim(node.name, {
                keys.REMEDIATION: failed.render(),
                keys.REQUEST: f"hand-off failed ({e}): power-cycle the node by hand. {request}"})
            self._tell(node.name, decisions.Reason.REMEDIATION_FAILED, failed.detail, now,
                       notify=True)  # fmt: skip
            return Outcome(decision, "applied", failed)
        mark = dataclasses.replace(started, result=model.Result.PUBLISHED,
                                   detail=f"node condition {CONDITION}=True")  # fmt: skip
        self.writer.annotate_after_claim(node.name, {keys.REMEDIATION: mark.render()})
        self._tell(node.name, decisions.Reason.REMEDIATION_HANDED_OFF, decision.detail, now)
        return Outcome(decision, "applied", mark)

    def _tell(self, node: str, reason: decisions.Reason, detail: str, now: datetime, *,
              notify: bool = False) -> None:  # fmt: skip
        """An Event on the node; a notification when asked. Failures are logged only."""
        action = decisions.Action(decisions.ActionKind.ANNOTATE, node, reason, detail=detail)
        try:
            self.writer.record_event(action, now)
            if notify and self.notifier is not None:
                self.notifier.notify(action, now)
        except GpuguardError as e:
            log.warning("%s: %s, but telling people failed: %s", node, reason, e)
