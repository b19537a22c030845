"""Phantom utilization: GPUs that look fully busy while doing nothing
(docs/design.md#phantom-utilization).

The signature, every part held over the whole window (``settings.phantom.hold``, 15 min):
SM (or graphics engine) active > 0.95 — GPU util >= 95 % where DCGM profiling metrics are
absent —, DRAM active < 0.02 (when profiled), framebuffer < 100 MiB, P-state 0 (or the SM
clock pinned near the model's max), power well above the model's idle, AND nothing on the GPU:
no pod (no dcgm-exporter ``pod`` label on it, and every GPU that live pods hold on the node
per kube-state-metrics tied by that label to another GPU — without the pod mapping: no GPU pod
on the node at all) and no process (the agent's list, when given). The pod join is the
decisive signal: a small compute-bound job looks the same on every metric but has a pod.

Input is one ``fleet.GpuWindow`` per GPU: min/max/avg/last of each series over the window,
fetched by ``sources.gpu_metrics`` (so a restarted guard decides the same). Missing data never
makes a finding. A phantom GPU is waste to report, not a fault: the result is a ``Finding``
(kind ``phantom``) with the wasted watts, GPU-hours so far, the evidence to take and the
seed's operating advice. Only the opt-in ``phantom.cordon`` setting turns it into an isolate
action; the breaker and tick limit still apply where the guard wires it.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuguard.catalog import gpu_models
from gpuguard.model import annotation_keys, decisions, durations, fleet, timestamps
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model

KIND = "phantom"
Reason = decisions.Reason

ADVICE = (
    "Production: recover first, analyse after — drain the node, then reboot it (or restart "
    "nvidia-persistenced; not verified in the phantom incident, docs/design.md#incidents).",
    "`nvidia-smi -r` fails ('In use by another client') while nvidia-persistenced holds every "
    "device handle, as it always does on Kubernetes GPU nodes.",
    "Take the evidence first: a reboot erases it. No Xid does not mean no problem.",
    "A new workload on the GPU cleared it in the phantom incident, by chance; do not rely on it.",
    "Prevent: NCCL timeout with TORCH_NCCL_ASYNC_ERROR_HANDLING, a terminationGracePeriodSeconds "
    "long enough for cleanup, RayJob shutdownAfterJobFinishes: true (`gpuguard` hygiene "
    "findings).",
)


@dataclass(frozen=True, slots=True)
class EvidenceCommand:
    """A ready-to-run command, where to run it, and what its answer shows."""

    run_on: str  # "workstation" (kubectl) or the node's name
    command: str
    shows: str


@dataclass(frozen=True, slots=True)
class PhantomGpu:
    """One phantom GPU: the finding and the figures and steps a human needs."""

    finding: decisions.Finding
    node: str
    gpu: str
    uuid: str
    model: str
    power_w: float
    idle_power_w: float
    idle_power_known: bool
    hours: float
    profiled: bool
    commands: tuple[EvidenceCommand, ...]
    advice: tuple[str, ...] = ADVICE

    @property
    def wasted_w(self) -> float:
        return max(0.0, self.power_w - self.idle_power_w)

    @property
    def wasted_kwh(self) -> float:
        return self.wasted_w * self.hours / 1000


@dataclass(frozen=True, slots=True)
class PhantomDecision:
    phantoms: tuple[PhantomGpu, ...]
    actions: tuple[decisions.Action, ...] = ()

    @property
    def findings(self) -> tuple[decisions.Finding, ...]:
        return tuple(p.finding for p in self.phantoms)

    @property
    def wasted_w(self) -> float:
        return sum(p.wasted_w for p in self.phantoms)


def decide(
    windows: Sequence[fleet.GpuWindow],
    settings: settings_model.PhantomSettings,
    models: gpu_models.GpuModelTable,
    now: datetime,
    processes: Mapping[str, int] | None = None,
) -> PhantomDecision:
    """Phantom GPUs among ``windows``; ``processes`` maps GPU UUID -> process count (None:
    no process list collected, the pod join alone decides)."""
    labelled = collections.Counter(w.node for w in windows if w.pods)
    found = [
        p
        for w in windows
        if (p := assess(w, settings, models, now, labelled[w.node], processes)) is not None
    ]
    found.sort(key=lambda p: (p.node, _index(p.gpu)))
    actions = _isolations(found, now) if settings.cordon else ()
    return PhantomDecision(tuple(found), actions)


def assess(
    window: fleet.GpuWindow,
    settings: settings_model.PhantomSettings,
    models: gpu_models.GpuModelTable,
    now: datetime,
    labelled_on_node: int,
    processes: Mapping[str, int] | None = None,
) -> PhantomGpu | None:
    """The GPU's phantom finding, or None when any part of the signature fails or is unknown.
    ``labelled_on_node``: GPUs of the same node that dcgm's pod label ties to a pod."""
    model = models.lookup(window.model)
    checks = (
        _held(window, settings),
        _busy(window, settings),
        _memory_idle(window, settings),
        _framebuffer_empty(window, settings),
        _clocks_pinned(window, settings, model),
        _power_above_idle(window, settings, model),
        _no_pod(window, labelled_on_node),
        _no_process(window, processes),
    )
    if not all(ok for ok, _ in checks):
        return None
    evidence = tuple(dataclasses.replace(e, at=now) for _, e in checks if e is not None)
    return _phantom(window, settings, model, now, evidence)


_Check = tuple[bool, decisions.Evidence | None]


def _evidence(source: str, value: str, window: fleet.GpuWindow) -> decisions.Evidence:
    labels = {"node": window.node, "gpu": window.gpu, "UUID": window.uuid}
    return decisions.Evidence(source=source, value=value, labels=labels)


def _held(window: fleet.GpuWindow, settings: settings_model.PhantomSettings) -> _Check:
    hold = durations.format_duration(settings.hold)
    return window.seen_at_start, _evidence("window", f"whole {hold} covered", window)


def _profiled(window: fleet.GpuWindow) -> bool:
    return window.stat(names.DCGM_SM_ACTIVE, "min") is not None or (
        window.stat(names.DCGM_GR_ENGINE_ACTIVE, "min") is not None
    )


def _busy(window: fleet.GpuWindow, settings: settings_model.PhantomSettings) -> _Check:
    if _profiled(window):
        active = max(
            window.stat(names.DCGM_SM_ACTIVE, "min") or 0.0,
            window.stat(names.DCGM_GR_ENGINE_ACTIVE, "min") or 0.0,
        )
        ok = active > settings.sm_active_min
        return ok, _evidence("min SM/GR engine active", f"{active:.3f}", window)
    util = window.stat(names.DCGM_GPU_UTIL, "min")
    ok = util is not None and util >= settings.util_min_pct
    return ok, _evidence("min GPU util % (no profiling metrics)", _num(util), window)


def _memory_idle(window: fleet.GpuWindow, settings: settings_model.PhantomSettings) -> _Check:
    if not _profiled(window):
        return True, None
    dram = window.stat(names.DCGM_DRAM_ACTIVE, "max")
    ok = dram is not None and dram < settings.dram_active_max
    return ok, _evidence("max DRAM active", _num(dram, 3), window)


def _framebuffer_empty(window: fleet.GpuWindow, settings: settings_model.PhantomSettings) -> _Check:
    fb = window.stat(names.DCGM_FB_USED, "max")
    ok = fb is not None and fb < settings.fb_used_max_mib
    return ok, _evidence("max framebuffer used MiB", _num(fb), window)


def _clocks_pinned(
    window: fleet.GpuWindow,
    settings: settings_model.PhantomSettings,
    model: gpu_models.PowerFacts,
) -> _Check:
    pstate = window.stat(names.DCGM_PSTATE, "max")
    if pstate is not None:
        return pstate == 0, _evidence("max P-state", f"P{pstate:.0f}", window)
    clock = window.stat(names.DCGM_SM_CLOCK, "min")
    ok = clock is not None and clock >= settings.sm_clock_near_max * model.max_sm_clock_mhz
    value = f"{_num(clock)} of max {model.max_sm_clock_mhz:.0f}"
    return ok, _evidence("min SM clock MHz (no P-state)", value, window)


def _power_above_idle(
    window: fleet.GpuWindow,
    settings: settings_model.PhantomSettings,
    model: gpu_models.PowerFacts,
) -> _Check:
    power = window.stat(names.DCGM_POWER, "min")
    ok = power is not None and power - model.idle_power_w >= settings.power_over_idle_min_w
    value = f"{_num(power, 1)} (idle {model.idle_power_w:g})"
    return ok, _evidence("min power W", value, window)


def _no_pod(window: fleet.GpuWindow, labelled_on_node: int) -> _Check:
    """No pod on this GPU: none by dcgm's pod label, and every GPU that live pods hold on the
    node (kube-state-metrics) is accounted for by a label on another GPU. Without dcgm's pod
    mapping that means no GPU pod on the node at all; unknown counts as a pod."""
    if window.pods:
        return False, None
    node_pods = window.node_gpu_pods
    if node_pods is None:
        return False, _evidence("GPUs held by live pods on the node", "unknown", window)
    value = f"{node_pods:g}, {labelled_on_node} of them labelled on other GPUs"
    ok = node_pods <= labelled_on_node
    return ok, _evidence("GPUs held by live pods on the node", value, window)


def _no_process(window: fleet.GpuWindow, processes: Mapping[str, int] | None) -> _Check:
    """No process holds the GPU. A GPU the agent did not report (no agent on the node, or an
    incomplete scan) is "not collected" — never a zero nobody measured."""
    count = None if processes is None else processes.get(window.uuid)
    if count is None:
        return True, _evidence("processes on this GPU", "not collected", window)
    return count == 0, _evidence("processes on this GPU", str(count), window)


def _phantom(
    window: fleet.GpuWindow,
    settings: settings_model.PhantomSettings,
    model: gpu_models.PowerFacts,
    now: datetime,
    evidence: tuple[decisions.Evidence, ...],
) -> PhantomGpu:
    power = window.stat(names.DCGM_POWER, "last") or window.stat(names.DCGM_POWER, "avg") or 0.0
    minutes = max(window.signature_minutes or 0.0, settings.hold / timedelta(minutes=1))
    wasted = max(0.0, power - model.idle_power_w)
    since = durations.format_duration(timedelta(minutes=round(minutes)))
    finding = decisions.Finding(
        kind=KIND,
        node=window.node,
        reason=Reason.PHANTOM_UTILIZATION,
        gpu=window.gpu,
        evidence=evidence,
        detail=f"GPU {window.gpu} busy with nothing for >= {since}: {power:.0f} W, "
        f"~{wasted:.0f} W over idle",
    )
    return PhantomGpu(
        finding=finding,
        node=window.node,
        gpu=window.gpu,
        uuid=window.uuid,
        model=window.model,
        power_w=power,
        idle_power_w=model.idle_power_w,
        idle_power_known=model.known,
        hours=minutes / 60,
        profiled=_profiled(window),
        commands=evidence_commands(window.node, window.gpu),
    )


def evidence_commands(node: str, gpu: str) -> tuple[EvidenceCommand, ...]:
    """The phantom incident's [docs/design.md#incidents] "collect next time" list, ready to run for
    ``node`` and GPU index ``gpu``."""
    exits = (
        f"kubectl get pods -A --field-selector spec.nodeName={node} -o json | jq -r "
        "'.items[] | [.metadata.namespace, .metadata.name, (.status.containerStatuses[]? "
        '| .lastState.terminated.exitCode // .state.terminated.exitCode // "-" '
        "| tostring)] | @tsv'"
    )
    return (
        EvidenceCommand("workstation", exits, "exit code 137 = SIGKILL: the orphaned-context path"),
        EvidenceCommand(
            "workstation",
            "kubectl get events -n <namespace> --field-selector involvedObject.name=<pod>",
            "kubelet's SIGTERM -> grace period -> SIGKILL timeline",
        ),
        EvidenceCommand(node, f"nvidia-smi -q -d ACCOUNTING -i {gpu}", "records of ended apps"),
        EvidenceCommand(node, f"nvidia-smi -q -d PIDS -i {gpu}", "client processes NVML sees"),
        EvidenceCommand(node, f"nvidia-smi -q -d FIRMWARE -i {gpu}", "GSP firmware state"),
        EvidenceCommand(node, "dmesg | grep -iE 'gsp|nvrm'", "GSP / driver messages, Xids"),
        EvidenceCommand(
            node, f"dcgmi dmon -e 1001 -i {gpu} -c 10", "GR engine activity (the engine-stuck test)"
        ),
    )


def _isolations(found: Sequence[PhantomGpu], now: datetime) -> tuple[decisions.Action, ...]:
    """One isolate action per node with a phantom GPU (opt-in ``phantom.cordon``)."""
    first: dict[str, PhantomGpu] = {}
    for p in found:
        first.setdefault(p.node, p)
    return tuple(
        decisions.Action(
            kind=decisions.ActionKind.ISOLATE,
            node=p.node,
            reason=Reason.PHANTOM_UTILIZATION,
            evidence=p.finding.evidence,
            annotations={
                annotation_keys.REASON: str(Reason.PHANTOM_UTILIZATION),
                annotation_keys.ISOLATED_AT: timestamps.format_utc(now),
                annotation_keys.GPU_UUID: p.uuid,
            },
            detail=f"phantom.cordon is on: {p.finding.detail}",
        )
        for p in first.values()
    )


def _num(value: float | None, digits: int = 0) -> str:
    return "missing" if value is None else f"{value:.{digits}f}"


def _index(gpu: str) -> int:
    return int(gpu) if gpu.isdecimal() else 0
