"""Per-node freshness: a GPU node whose dcgm-exporter stopped answering is ``exporter-silent``.

The fleet-wide freshness check (``sources.prometheus``) fails the tick only when no exporter
answers; one silent exporter among fresh ones leaves that node's GPUs looking as they were
last seen — healthy. So each Ready GPU node must have its own recent dcgm-exporter sample
(``DCGM_NODE_NEWEST``); without one the node gets a finding, and the return checks treat its
GPU facts as unknown, never healthy. A node that is not Ready (rebooting, down) is not asked:
its exporter is down with it, and other checks say so.

Pure: the samples and the instant are arguments.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuguard.model import decisions, fleet
from gpuguard.model import metric_names as names
from gpuguard.policy import xid_signals

KIND = "exporter"


def silent_exporters(
    snapshot: fleet.FleetSnapshot, staleness: timedelta
) -> tuple[decisions.Finding, ...]:
    """One ``exporter-silent`` finding per Ready GPU node without a dcgm-exporter sample newer
    than ``staleness`` at the snapshot's instant."""
    newest = _newest_by_node(snapshot.samples)
    findings = []
    for node in snapshot.nodes:
        if node.gpu_capacity <= 0 or not node.ready:
            continue
        seen = newest.get(node.name)
        age = None if seen is None else snapshot.taken_at - seen
        if age is None or age > staleness:
            findings.append(_finding(node.name, seen, age, staleness))
    return tuple(findings)


def _newest_by_node(samples: tuple[fleet.MetricSample, ...]) -> dict[str, datetime]:
    newest: dict[str, datetime] = {}
    for sample in samples:
        node = xid_signals.node_of(sample.labels)
        if sample.name != names.DCGM_NODE_NEWEST or node is None:
            continue
        when = datetime.fromtimestamp(sample.value, UTC)
        newest[node] = max(when, newest.get(node, when))
    return newest


def _finding(
    node: str, seen: datetime | None, age: timedelta | None, staleness: timedelta
) -> decisions.Finding:
    if seen is None or age is None:
        detail = "no dcgm-exporter sample for this node: its GPUs are unknown, not healthy"
    else:
        detail = (
            f"newest dcgm-exporter sample is {age} old (bound {staleness}): its GPUs are "
            "unknown, not healthy"
        )
    evidence = decisions.Evidence(f"{names.DCGM_GPU_UTIL} of {node}", detail, seen)
    return decisions.Finding(KIND, node, decisions.Reason.EXPORTER_SILENT, None, (evidence,),
                             detail)  # fmt: skip
