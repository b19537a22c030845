"""The recovery step of a tick: for each node gpuguard isolated (on an earlier tick) without a
verdict yet — start the evidence Job, then, once it ended, record the ledger line and annotate
the verdict and the drafted request (``policy.recovery`` decides; this applies).

Writes are re-checked against leadership and skipped in dry-run, like isolation. The ledger
line is written before the annotation: a crash in between leaves a node without a verdict,
which the next tick completes without writing the line twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from gpuguard.actuators import jobs as job_specs
from gpuguard.actuators import ledger as ledger_store
from gpuguard.catalog import xid as xid_catalog
from gpuguard.controller import failsafe
from gpuguard.errors import GpuguardError, InputError
from gpuguard.model import annotation_keys, decisions, fleet, ports, settings
from gpuguard.policy import escalation, recovery

log = logging.getLogger(__name__)


@dataclass
class Recovery:
    jobs: ports.JobsPort
    ledger: ports.LedgerPort[ledger_store.LedgerRead]
    writer: ports.ClusterWriter
    catalog: xid_catalog.XidCatalog
    image: str
    namespace: str = "gpuguard"
    notifier: ports.Notifier | None = None
    runtime_class: str | None = None
    merge_window: timedelta = escalation.DEFAULT_MERGE_WINDOW  # merge_window_for(hold window)
    evidence_deadline: timedelta = settings.DEFAULT_EVIDENCE_DEADLINE
    lookback: timedelta = recovery.DEFAULT_LOOKBACK  # isolation.xid_lookback

    def run(
        self,
        nodes: tuple[fleet.Node, ...],
        now: datetime,
        *,
        may_write: Callable[[], bool],
        errors: failsafe.StepErrors | None = None,
    ) -> list[recovery.RecoveryStep]:
        """One node's failure (a malformed annotation, an unexpected exception) costs only that
        node: it is logged, added to ``errors`` and the others go on."""
        errors = [] if errors is None else errors
        pending = [n for n in nodes if recovery.needs_recovery(n)]
        if not pending:
            return []
        try:
            entries = self.ledger.entries().entries
        except GpuguardError as e:
            log.warning("recovery waits: the fault ledger cannot be read: %s", e)
            return []
        steps = []
        for node in pending:
            subject = f"node {node.name} (annotations {_marks(node)})"
            decide = partial(self._node, node, entries, now)
            step = failsafe.guarded("recovery", subject, errors, decide, None)
            if step is not None:
                steps.append(step)
                if may_write():
                    apply = partial(self._apply, node, step, now)
                    failsafe.guarded("recovery", subject, errors, apply, None)
        return steps

    def _node(
        self, node: fleet.Node, entries: list[Any], now: datetime
    ) -> recovery.RecoveryStep | None:
        name = job_specs.job_name(
            job_specs.JobKind.EVIDENCE, node.name, node.marks.isolated_at or ""
        )
        # the uid recorded when gpuguard created it ("" none: the Job was there before it)
        created = node.marks.evidence_job_uid or ""
        try:
            job = self.jobs.result(name, created_uid=created)
        except GpuguardError as e:
            log.warning("%s: evidence Job %s unreadable, next tick retries: %s", node.name, name, e)
            return None
        try:
            return recovery.decide(
                node,
                job,
                entries,
                self.catalog,
                now,
                merge_window=self.merge_window,
                lookback=self.lookback,
            )
        except InputError as e:  # a malformed gpuguard annotation on this node only
            message = f"{node.name}: recovery skipped, fix the node's annotation: {e}"
            log.log(logging.ERROR if failsafe.first_time(message) else logging.DEBUG, message)
            return None

    def _apply(self, node: fleet.Node, step: recovery.RecoveryStep, now: datetime) -> None:
        try:
            made = self._start_job(node) if step.start_evidence_job else None
            if step.started_mark is not None or made is not None:
                uid = {} if made is None else {annotation_keys.EVIDENCE_JOB_UID: made}
                self.writer.annotate(node, {**(step.started_mark or {}), **uid})
            if step.record is not None:
                self.ledger.append(step.record)
            if step.annotations is not None:
                self.writer.annotate(node, dict(step.annotations))
                self._announce(node, step, now)
        except GpuguardError as e:
            log.warning("%s: recovery step not completed (next tick retries): %s", node.name, e)

    def _start_job(self, node: fleet.Node) -> str | None:
        """Create the evidence Job; its uid, or None when a Job of its name was there."""
        manifest = job_specs.evidence_job(
            node.name,
            node.marks.isolated_at or "",
            image=self.image,
            namespace=self.namespace,
            runtime_class=self.runtime_class,
            deadline=self.evidence_deadline,
        )
        made = self.jobs.create(manifest)
        if made is not None:
            log.info("%s: evidence Job %s created", node.name, manifest["metadata"]["name"])
        return made

    def _announce(self, node: fleet.Node, step: recovery.RecoveryStep, now: datetime) -> None:
        action = decisions.Action(
            kind=decisions.ActionKind.ANNOTATE,
            node=node.name,
            reason=decisions.Reason.VERDICT_RECORDED,
            evidence=step.evidence,
            annotations=dict(step.annotations or {}),
            detail=f"verdict {step.verdict} ({step.escalation}): {step.request}",
        )
        try:
            self.writer.record_event(action, now)
            if self.notifier is not None:
                self.notifier.notify(action, now)
        except GpuguardError as e:
            log.warning("%s: verdict recorded, but telling people failed: %s", node.name, e)


def _marks(node: fleet.Node) -> dict[str, str]:
    """gpuguard's annotations on the node: the input a failure is logged with."""
    return {k: v for k, v in node.annotations.items() if annotation_keys.is_gpuguard_key(k)}
