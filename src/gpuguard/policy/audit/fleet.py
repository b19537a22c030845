"""Scheduling and interconnect rules: the fleet-health detectors (``policy.gang``,
``policy.topology``, ``policy.interconnect``; docs/fleet-health.md) run over the audit's view —
a job holding GPUs while part of it cannot be placed, a multi-GPU pod on GPUs not joined by
NVLink, throttled GPUs, NVLink, PCIe and InfiniBand errors."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from gpuguard.model import decisions, workloads
from gpuguard.model import metric_names as names
from gpuguard.model.audit import AuditView, Severity
from gpuguard.policy import gang, interconnect, topology
from gpuguard.policy.audit.registry import Hit, NotChecked

# GANG-1 -----------------------------------------------------------------------------------


def gang_deadlock(view: AuditView) -> Iterator[Hit]:
    for found in gang.detect(view.workload_pods, view.at, grace=view.fleet_settings.gang_grace):
        objects = (f"Job/{found.job}", *(f"Node/{n}" for n in found.nodes))
        yield Hit(Severity.HIGH, objects, found.finding().detail)


# GANG-0 -----------------------------------------------------------------------------------


def no_gang(view: AuditView) -> Iterator[Hit]:
    """``gang.not_gang_scheduled`` per job; pods grouped only by their owner (a Deployment's
    replicas) are serving replicas, not a job that must start whole."""
    jobs: dict[gang.JobKey, list[workloads.WorkloadPod]] = defaultdict(list)
    for pod in view.workload_pods:
        key = gang.job_of(pod)
        if key is not None and key.system != gang.OWNER:
            jobs[key].append(pod)
    for key, pods in sorted(jobs.items(), key=lambda item: str(item[0])):
        for found in gang.not_gang_scheduled(pods):
            yield Hit(Severity.MEDIUM, (f"Job/{key}",), found.detail)


# TOPO-1 -----------------------------------------------------------------------------------


def topology_mismatch(view: AuditView) -> Iterable[Hit] | NotChecked:
    known = topology.from_samples(view.health_samples)
    if not known:
        return NotChecked(f"no {names.GPU_NVLINK_PEER} series: the node agent's topology probe "
                          "is not running or not scraped")
    return [_hit(f, Severity.MEDIUM) for f in topology.mismatches(known, view.pod_gpus)]


# THROTTLE-1, NVLINK-1, PCIE-1, IB-1 ------------------------------------------------------


def throttled(view: AuditView) -> Iterable[Hit] | NotChecked:
    return _interconnect(view, interconnect.THROTTLED, Severity.MEDIUM)


def nvlink_errors(view: AuditView) -> Iterable[Hit] | NotChecked:
    return _interconnect(view, interconnect.NVLINK, Severity.HIGH)


def pcie_replays(view: AuditView) -> Iterable[Hit] | NotChecked:
    return _interconnect(view, interconnect.PCIE, Severity.MEDIUM)


def ib_flapping(view: AuditView) -> Iterable[Hit] | NotChecked:
    return _interconnect(view, interconnect.IB_FLAPPING, Severity.HIGH)


def _interconnect(view: AuditView, kind: str, severity: Severity) -> Iterable[Hit] | NotChecked:
    if kind in interconnect.unchecked(view.health_samples):
        return NotChecked(f"{kind}: no series in Prometheus (the exporter does not collect it)")
    return [_hit(f, severity) for f in interconnect.detect(view.health_samples, view.fleet_settings)
            if f.kind == kind]


def _hit(finding: decisions.Finding, severity: Severity) -> Hit:
    gpu = f" GPU {finding.gpu}" if finding.gpu else ""
    return Hit(severity, (f"Node/{finding.node}{gpu}",), finding.detail)
