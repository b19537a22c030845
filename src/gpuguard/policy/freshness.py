"""Per-node freshness: a GPU node whose dcgm-exporter stopped answering is ``exporter-silent``;
one whose gpuguard agent stopped answering is ``agent-silent``.

The fleet-wide freshness check (``sources.prometheus``) fails the tick only when no exporter
answers; one silent exporter among fresh ones leaves that node's GPUs looking as they were
last seen — healthy. So each Ready GPU node must have its own recent dcgm-exporter sample
(``DCGM_NODE_NEWEST``); without one the node gets a finding, and the return checks treat its
GPU facts as unknown, never healthy. A node that is not Ready (rebooting, down) is not asked:
its exporter is down with it, and other checks say so.

The agent is checked the same way (``AGENT_NODE_NEWEST``), once any node's agent is scraped at
all: the chart's DaemonSet runs on every GPU node, so a GPU node without a fresh agent sample
while others have one lost its agent (or never had it). When no node has one, the agent is not
deployed or not scraped: nothing to say per node.

Pure: the samples and the instant are arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpuguard.model import decisions, fleet
from gpuguard.model import metric_names as names
from gpuguard.policy import xid_signals

KIND = "exporter"
_LAST_SANE_TIME = 4_102_444_800.0  # 2100-01-01T00:00:00Z


@dataclass(frozen=True, slots=True)
class _Source:
    kind: str
    sample: str  # the per-node newest-sample series
    series: str  # what it is the newest sample of (for the evidence)
    reason: decisions.Reason
    what: str
    consequence: str


_EXPORTER = _Source(
    KIND, names.DCGM_NODE_NEWEST, names.DCGM_GPU_UTIL, decisions.Reason.EXPORTER_SILENT,
    "dcgm-exporter", "its GPUs are unknown, not healthy",
)  # fmt: skip
_AGENT = _Source(
    "agent", names.AGENT_NODE_NEWEST, names.AGENT_KERNEL_LINES_TOTAL,
    decisions.Reason.AGENT_SILENT, "gpuguard agent", "its kernel-log Xids are not seen",
)  # fmt: skip


def silent_exporters(
    snapshot: fleet.FleetSnapshot, staleness: timedelta
) -> tuple[decisions.Finding, ...]:
    """One ``exporter-silent`` finding per Ready GPU node without a dcgm-exporter sample newer
    than ``staleness`` at the snapshot's instant; ``agent-silent`` likewise for the agent."""
    found = _silent(snapshot, staleness, _EXPORTER)
    if any(s.name == names.AGENT_NODE_NEWEST for s in snapshot.samples):
        found += _silent(snapshot, staleness, _AGENT)
    return found


def _silent(
    snapshot: fleet.FleetSnapshot, staleness: timedelta, source: _Source
) -> tuple[decisions.Finding, ...]:
    newest = _newest_by_node(snapshot.samples, source.sample)
    findings = []
    for node in snapshot.nodes:
        if node.gpu_capacity <= 0 or not node.ready:
            continue
        seen = newest.get(node.name)
        age = None if seen is None else snapshot.taken_at - seen
        if age is None or age > staleness:
            findings.append(_finding(node.name, seen, age, staleness, source))
    return tuple(findings)


def _newest_by_node(samples: tuple[fleet.MetricSample, ...], name: str) -> dict[str, datetime]:
    newest: dict[str, datetime] = {}
    for sample in samples:
        if sample.name != name:
            continue
        node = xid_signals.node_of(sample.labels)
        if node is None or not 0 <= sample.value < _LAST_SANE_TIME:
            continue  # a time that is no time says nothing: the node counts as silent
        when = datetime.fromtimestamp(sample.value, UTC)
        newest[node] = max(when, newest.get(node, when))
    return newest


def _finding(
    node: str, seen: datetime | None, age: timedelta | None, staleness: timedelta,
    source: _Source,
) -> decisions.Finding:  # fmt: skip
    if seen is None or age is None:
        detail = f"no {source.what} sample for this node: {source.consequence}"
    else:
        detail = (
            f"newest {source.what} sample is {age} old (bound {staleness}): {source.consequence}"
        )
    evidence = decisions.Evidence(f"{source.series} of {node}", detail, seen)
    return decisions.Finding(source.kind, node, source.reason, None, (evidence,), detail)
