"""The return-to-pool step of a tick: for each node gpuguard isolated, gather the facts, let
``policy.return_to_pool`` decide, and apply its step (docs/design.md#return-to-pool).

- ``start-burn-in``: create the burn-in Job (create-if-absent; named per isolation, boot,
  reset and inspection, so a burn-in that failed runs again only after another power cycle,
  reset or inspection);
- ``uncordon``: ONE merge patch (``unschedulable: false`` and gpuguard's annotations removed),
  an Event, a "returned to service" notification;
- ``stay-isolated``: a ledger line for the failed burn-in, then annotate
  ``gpuguard.io/return-failed`` and ``gpuguard.io/burnin-failed`` once, an Event, a
  notification; the mark, not the Job (which its TTL deletes), keeps the failure;
- ``clean-annotations`` (a human uncordoned first): remove gpuguard's annotations, an Event
  saying the burn-in was skipped.

The burn-in's boot and mode: the Job is created for the node's boot ID of that tick and the
mode the policy asks for (both in its name; the boot ID also in its ``gpuguard.io/boot-id``
annotation) and looked up under the node's current boot ID and mode, so a result read back
is, by construction, a result of this boot and mode. ``started_at`` is the pod's start time
(the read time when the API did not say).

A fact that cannot be read is ``None`` (the policy waits): a Prometheus error leaves every
metric fact unknown, a ledger error the card's history. Nodes still waiting for the evidence
Job's verdict (``recovery``) are decided, for ``gpuguard explain``, but not acted on: the
ledger line of this fault, which the card's history counts, is written with the verdict.
Writes are re-checked against leadership and skipped in dry-run; a failed write is retried by
the next tick.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, Protocol

from gpuguard.actuators import jobs as job_specs
from gpuguard.actuators import ledger as ledger_store
from gpuguard.controller import failsafe
from gpuguard.errors import GpuguardError, SourceError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions, fleet, ports
from gpuguard.model import jobs as job_model
from gpuguard.model import return_to_pool as model
from gpuguard.model import settings as settings_model
from gpuguard.model.node_marks import Isolation
from gpuguard.policy import escalation, return_to_pool, xid_signals
from gpuguard.policy import recovery as recovery_policy
from gpuguard.sources import return_facts

log = logging.getLogger(__name__)
Step = model.ReturnStep
AWAITING_VERDICT = "waiting for the evidence verdict"


class ReturnWriter(Protocol):
    def uncordon(self, node: fleet.Node, remove_annotations: tuple[str, ...]) -> None: ...

    def annotate(self, node: fleet.Node, annotations: dict[str, str | None]) -> None: ...

    def record_event(self, action: decisions.Action, now: datetime) -> None: ...


@dataclass(frozen=True, slots=True)
class ReturnOutcome:
    """The policy's decision for one node and what became of its write this tick:
    ``applied``, ``dry-run`` (or not the leader), ``error: ...``, ``AWAITING_VERDICT``, or
    ``-`` (nothing to write)."""

    decision: model.ReturnDecision
    done: str

    @property
    def returned(self) -> bool:
        return self.decision.step is Step.UNCORDON and self.done == "applied"


@dataclass
class ReturnToPool:
    """The return step's ports; ``run`` decides for every node gpuguard isolated and applies
    what ``may_write()`` allows (re-checked before each write)."""

    jobs: ports.JobsPort
    ledger: ports.LedgerPort[ledger_store.LedgerRead]
    writer: ReturnWriter
    facts: ports.NodeMetricsSource
    classifier: xid_signals.XidClassifier
    settings: settings_model.GuardSettings
    image: str
    namespace: str = "gpuguard"
    notifier: ports.Notifier | None = None
    await_verdict: bool = True

    def run(
        self,
        snapshot: fleet.FleetSnapshot,
        now: datetime,
        *,
        may_write: Callable[[], bool],
        errors: failsafe.StepErrors | None = None,
        silent: frozenset[str] = frozenset(),
    ) -> list[ReturnOutcome]:
        """One node's failure (a malformed annotation, an unexpected exception) costs only that
        node: it is logged, added to ``errors`` and the others go on. The GPU facts of nodes
        whose exporter is ``silent`` (``policy.freshness``) are unknown, whatever was last seen."""
        errors = [] if errors is None else errors
        candidates = [n for n in snapshot.nodes if n.marks.isolation is not Isolation.NONE]
        if not candidates:
            return []
        evaluated = [n.name for n in candidates]
        gatherer = dataclasses.replace(_Gatherer.read(self, now, evaluated), silent=silent)
        outcomes = []
        for node in candidates:
            subject = f"node {node.name} (annotations {_marks(node)})"
            one = partial(self._one, node, gatherer, snapshot.pods_on(node.name), now, may_write)
            outcome = failsafe.guarded("return_to_pool", subject, errors, one, None)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    def _one(
        self,
        node: fleet.Node,
        gatherer: _Gatherer,
        pods: tuple[fleet.Pod, ...],
        now: datetime,
        may_write: Callable[[], bool],
    ) -> ReturnOutcome:
        decision = self._decide(node, gatherer, pods, now)
        return ReturnOutcome(decision, self._carry_out(node, decision, now, may_write))

    def _decide(
        self,
        node: fleet.Node,
        gatherer: _Gatherer,
        pods: tuple[fleet.Pod, ...],
        now: datetime,
    ) -> model.ReturnDecision:
        """Decide on the checklist; once it all passes, again with the burn-in Job of the
        mode the policy asks for (its result, if any, decides the step)."""
        facts = gatherer.facts(node, pods)
        decision = return_to_pool.decide(node, facts, self.settings, now)
        mode = decision.burnin_mode
        if decision.step is not Step.START_BURN_IN or mode is None:
            return decision
        result = gatherer.burnin(node, mode)
        if result is None:
            return decision
        with_result = dataclasses.replace(facts, burnin=result)
        return return_to_pool.decide(node, with_result, self.settings, now)

    def _carry_out(
        self,
        node: fleet.Node,
        decision: model.ReturnDecision,
        now: datetime,
        may_write: Callable[[], bool],
    ) -> str:
        if not decision_writes(decision):
            return "-"
        if self.await_verdict and recovery_policy.needs_recovery(node):
            return AWAITING_VERDICT
        if not may_write():
            return "dry-run"
        return self._apply(node, decision, now)

    def _apply(self, node: fleet.Node, decision: model.ReturnDecision, now: datetime) -> str:
        try:
            match decision.step:
                case Step.START_BURN_IN:
                    tell = self._start_burnin(node, decision)
                case Step.UNCORDON:
                    self.writer.uncordon(node, decision.remove_annotations)
                    tell = True
                case Step.STAY_ISOLATED if decision.action is not None:
                    self._record(decision)
                    self.writer.annotate(node, dict(decision.action.annotations))
                    tell = True
                case Step.CLEAN_ANNOTATIONS:
                    self.writer.annotate(node, dict.fromkeys(decision.remove_annotations))
                    tell = True
                case _:
                    return "-"
        except GpuguardError as e:
            log.warning("%s: %s not applied (next tick retries): %s", node.name, decision.step, e)
            return f"error: {e}"
        if tell:
            log.info("%s: %s (%s): %s", node.name, decision.step, decision.reason, decision.detail)
            self._announce(decision, now)
        return "applied"

    def _record(self, decision: model.ReturnDecision) -> None:
        """A failed burn-in's ledger line, before the annotation that marks it recorded; a
        line already there (a crash after it was written) is not written twice."""
        line = decision.record
        if line is None:
            return
        if not any(
            (e.node, e.at, e.kind) == (line.node, line.at, line.kind)
            for e in self.ledger.entries().entries
        ):
            self.ledger.append(line)

    def _start_burnin(self, node: fleet.Node, decision: model.ReturnDecision) -> bool:
        """Create the Job unless an earlier tick did; True when this call created it."""
        mode = decision.burnin_mode or model.BurninMode.MATMUL_AND_MEMTEST
        manifest = job_specs.burnin_job(
            node.name,
            node.marks.isolated_at or "",
            node.boot_id,
            gpus=node.gpu_capacity,
            mode=str(mode),
            image=self.image,
            reason=node.marks.reason,
            reset_done=node.marks.reset_done,
            namespace=self.namespace,
            runtime_class=self.settings.controller.job_runtime_class,
            inspected=node.marks.inspected,
            deadline=self.settings.return_to_pool.burnin_deadline,
        )
        uid = self.jobs.create(manifest)
        if uid is not None:  # read back against it (burnin_created_uid)
            name = manifest["metadata"]["name"]
            self.writer.annotate(node, {keys.BURNIN_JOB_UID: f"{name}={uid}"})
        return uid is not None

    def _announce(self, decision: model.ReturnDecision, now: datetime) -> None:
        """An Event on the node for every step written; people hear of returns and failures."""
        action = decision.action
        if action is None:
            return
        try:
            self.writer.record_event(action, now)
            if self.notifier is not None and decision.step in (Step.UNCORDON, Step.STAY_ISOLATED):
                self.notifier.notify(action, now)
        except GpuguardError as e:
            log.warning("%s: %s done, but telling people failed: %s", action.node, decision.step, e)


def decision_writes(decision: model.ReturnDecision) -> bool:
    """Whether the step writes to the cluster (START_BURN_IN writes a Job, not an action)."""
    return decision.step is Step.START_BURN_IN or (
        decision.action is not None
        and decision.step in (Step.UNCORDON, Step.STAY_ISOLATED, Step.CLEAN_ANNOTATIONS)
    )


def burnin_result(
    job: job_model.JobResult, mode: model.BurninMode, boot_id: str, read_at: datetime
) -> model.BurninResult | None:
    """The burn-in Job (run in ``mode`` on ``boot_id``) and its ``gpuguard burnin --summary``
    message as a result (None while no Job exists). Passed only when the pod succeeded AND the
    summary says passed; an unreadable summary is a failure a human must see, never a pass."""
    if job.state is job_model.JobState.ABSENT:
        return None
    read_at = job.started_at or read_at
    if job.state is job_model.JobState.RUNNING:
        return model.BurninResult(model.BurninOutcome.RUNNING, mode, boot_id, read_at)
    summary = _summary(job.message)
    if summary.get("passed") is True and job.state is job_model.JobState.SUCCEEDED:
        detail = _passed_detail(summary)
        return model.BurninResult(model.BurninOutcome.PASSED, mode, boot_id, read_at, "", detail)
    failed = _failed_check(summary) or f"burn-in Job {job.state}: {job.detail or 'no summary'}"
    return model.BurninResult(model.BurninOutcome.FAILED, mode, boot_id, read_at, failed)


def _summary(message: str | None) -> dict[str, Any]:
    try:
        data = json.loads(message or "")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _failed_check(summary: Mapping[str, Any]) -> str:
    checks = summary.get("checks")
    for check in checks if isinstance(checks, list) else []:
        if isinstance(check, dict) and check.get("status") != str(decisions.CheckStatus.PASS):
            return f"{check.get('check')} {check.get('status')}: {check.get('evidence', '')}"[:200]
    return ""


def _passed_detail(summary: Mapping[str, Any]) -> str:
    found, ratio = summary.get("found_gpus"), summary.get("ratio_min_max")
    return f"{found} GPU(s), min/max {ratio}" if ratio is not None else f"{found} GPU(s)"


def _marks(node: fleet.Node) -> dict[str, str]:
    """gpuguard's annotations on the node: the input a failure is logged with."""
    return {k: v for k, v in node.annotations.items() if keys.is_gpuguard_key(k)}


def burnin_created_uid(node: fleet.Node, name: str) -> str:
    """The uid gpuguard recorded when it created the burn-in Job ``name`` on ``node`` ("" when
    it recorded none for that Job: a Job of that name is then not gpuguard's)."""
    recorded, _, uid = (node.marks.burnin_job_uid or "").rpartition("=")
    return uid if recorded == name else ""


def burnin_job_name(node: fleet.Node, mode: model.BurninMode) -> str:
    """The burn-in Job of the node's current isolation, boot, reset and inspection, in ``mode``."""
    key = return_to_pool.burnin_key(node, mode)
    return job_specs.job_name(job_specs.JobKind.BURNIN, node.name, key)


@dataclass(frozen=True)
class _Gatherer:
    """The facts read once per tick for every candidate node."""

    step: ReturnToPool
    now: datetime
    samples: Mapping[str, tuple[fleet.MetricSample, ...]] | None
    ledger: ledger_store.LedgerRead | None
    silent: frozenset[str] = frozenset()

    @classmethod
    def read(cls, step: ReturnToPool, now: datetime, nodes: list[str]) -> _Gatherer:
        """The metric facts of ``nodes`` only (the Prometheus answers grow with the isolated
        nodes, not the fleet), and the ledger."""
        try:
            by_node: dict[str, list[fleet.MetricSample]] = defaultdict(list)
            for sample in step.facts.samples_of(now, nodes):
                if (name := xid_signals.node_of(sample.labels)) is not None:
                    by_node[name].append(sample)
            samples: dict[str, tuple[fleet.MetricSample, ...]] | None = {
                name: tuple(found) for name, found in by_node.items()
            }
        except SourceError as e:
            log.warning("return facts unreadable (nodes wait): %s", e)
            samples = None
        try:
            ledger: ledger_store.LedgerRead | None = step.ledger.entries()
        except GpuguardError as e:
            log.warning("ledger unreadable (card history unknown): %s", e)
            ledger = None
        return cls(step, now, samples, ledger)

    def facts(self, node: fleet.Node, pods: tuple[fleet.Pod, ...]) -> model.ReturnFacts:
        metrics = None if self.samples is None else self.samples.get(node.name, ())
        # No dcgm-exporter series for the node, or only stale ones: its GPU facts are unknown.
        reporting = metrics is not None and return_facts.dcgm_reporting(metrics)
        gpus = metrics if reporting and node.name not in self.silent else None
        return model.ReturnFacts(
            pods=pods,
            hardware_xids_since_boot=None if gpus is None else self._xids(node, gpus),
            card_faults=self._card_faults(node),
            row_remap_pending=None if gpus is None else return_facts.row_remap_pending(gpus),
            conformance=None if metrics is None else return_facts.conformance(metrics),
            pcie_links=None if gpus is None else return_facts.pcie_links(gpus),
        )

    def _xids(
        self, node: fleet.Node, gpus: tuple[fleet.MetricSample, ...]
    ) -> tuple[decisions.Evidence, ...]:
        gauge = return_facts.xid_samples(gpus)
        signals = xid_signals.hardware_xids(gauge, self.step.classifier).get(node.name, [])
        return tuple(signal.evidence for signal in signals)

    def _card_faults(self, node: fleet.Node) -> int | None:
        uuid = node.marks.gpu_uuid
        if self.ledger is None or not uuid:
            return None
        if any(uuid in line for line in self.ledger.malformed):
            return None  # one of this card's lines cannot be read: the count is not known
        window = escalation.merge_window_for(self.step.settings.isolation.hold_window)
        return escalation.card_fault_count(self.ledger.entries, uuid, merge_window=window)

    def burnin(self, node: fleet.Node, mode: model.BurninMode) -> model.BurninResult | None:
        try:
            name = burnin_job_name(node, mode)
            job = self.step.jobs.result(name, created_uid=burnin_created_uid(node, name))
        except GpuguardError as e:
            log.warning("%s: burn-in Job unreadable: %s", node.name, e)
            return None
        return burnin_result(job, mode, node.boot_id, self.now)
