"""Throttling and interconnect health from dcgm-exporter and node-exporter series
(docs/fleet-health.md#throttling-and-interconnect).

One synchronous job runs at the speed of its slowest GPU and link, so a GPU whose clocks are
cut or one bad link slows every GPU of the job without failing anything (the 4,088-GPU bring-up
in docs/design.md#incidents: flapping links, cabling errors, ports that failed only under load).

- ``gpu-throttled``: a GPU reported a counted clock-event reason (thermal, HW slowdown, HW power
  brake; ``settings.throttle_reasons``) for at least ``throttle_min_fraction`` of the window.
  The reason is a bit of ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``
  (``metric_names.CLOCK_EVENT_REASON_BITS``).
- ``nvlink-errors``: NVLink CRC (flit + data) and replay errors in the window reach
  ``nvlink_errors_min``, or any NVLink recovery error happened.
- ``pcie-replays``: the PCIe replay counter grew by ``pcie_replays_min`` in the window.
- ``ib-link-flapping``: an InfiniBand port's ``link_downed`` counter grew by ``ib_flaps_min``.

``persistent`` names the nodes that keep doing it over the longer persistence window (for
``gpuguard status``). Input: the named samples of ``sources.fleet_health``'s plan; a series
that is absent makes no finding (the exporter does not collect it: not checked, never healthy
— ``unchecked`` says which). Pure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuguard.model import decisions, fleet, series
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model

THROTTLED = "gpu-throttled"
NVLINK = "nvlink-errors"
PCIE = "pcie-replays"
IB_FLAPPING = "ib-link-flapping"
KINDS = (THROTTLED, NVLINK, PCIE, IB_FLAPPING)
NVLINK_CRC_REPLAY = frozenset({"crc_flit", "crc_data", "replay"})
NVLINK_RECOVERY = "recovery"
IB_DOWNED = "link_downed"
Settings = settings_model.FleetHealthSettings


def node_of(labels: Mapping[str, str]) -> str | None:
    """The node of a series: gpuguard's precedence (``series.node_of``), else node-exporter's
    ``instance`` without its port (kube-prometheus relabels it to the node's name)."""
    node = series.node_of(labels)
    if node:
        return node
    instance = labels.get("instance", "")
    return instance.rsplit(":", 1)[0] if instance else None


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """A node that throttles or flaps persistently, and why (one line per cause)."""

    node: str
    reasons: tuple[str, ...]


def detect(samples: Iterable[fleet.MetricSample], settings: Settings) -> list[decisions.Finding]:
    """Every finding of the short window, sorted by node."""
    by_name = _by_name(samples)
    found = (
        _throttled(by_name.get(names.windowed(names.THROTTLE_FRACTION, names.SHORT), []), settings)
        + _nvlink(by_name.get(names.windowed(names.NVLINK_ERRORS_INCREASE, names.SHORT), []),
                  settings)
        + _pcie(by_name.get(names.windowed(names.PCIE_REPLAYS_INCREASE, names.SHORT), []), settings)
        + _ib(by_name.get(names.windowed(names.IB_ERRORS_INCREASE, names.SHORT), []),
              settings.ib_flaps_min)
    )  # fmt: skip
    return sorted(found, key=lambda f: (f.node, f.kind, f.gpu or ""))


def unchecked(samples: Iterable[fleet.MetricSample]) -> list[str]:
    """The kinds no series was found for: not checked (the exporter does not collect them).
    A kind is collected when its short-window series are there, or, where the plan asked only
    for the values a finding needs, when its coverage count is (Prometheus answers no count of
    no series)."""
    present = {s.name for s in samples}
    wanted = {
        THROTTLED: names.THROTTLE_FRACTION, NVLINK: names.NVLINK_ERRORS_INCREASE,
        PCIE: names.PCIE_REPLAYS_INCREASE, IB_FLAPPING: names.IB_ERRORS_INCREASE,
    }  # fmt: skip
    return [kind for kind, what in wanted.items()
            if not {names.windowed(what, names.SHORT), names.coverage(what)} & present]  # fmt: skip


def persistent(samples: Iterable[fleet.MetricSample], settings: Settings) -> list[NodeHealth]:
    """Nodes that throttled or flapped over the persistence window."""
    by_name = _by_name(samples)
    reasons: dict[str, list[str]] = defaultdict(list)
    throttle = by_name.get(names.windowed(names.THROTTLE_FRACTION, names.LONG), [])
    for f in _throttled(throttle, settings):
        reasons[f.node].append(f.detail)
    flaps = by_name.get(names.windowed(names.IB_ERRORS_INCREASE, names.LONG), [])
    for f in _ib(flaps, settings.persistent_ib_flaps):
        reasons[f.node].append(f.detail)
    return [NodeHealth(node, tuple(why)) for node, why in sorted(reasons.items())]


def _by_name(samples: Iterable[fleet.MetricSample]) -> dict[str, list[fleet.MetricSample]]:
    out: dict[str, list[fleet.MetricSample]] = defaultdict(list)
    for s in samples:
        out[s.name].append(s)
    return out


def _gpu_key(labels: Mapping[str, str]) -> tuple[str, str] | None:
    node = node_of(labels)
    return None if node is None else (node, series.gpu_of(labels))


def _throttled(
    samples: Sequence[fleet.MetricSample], settings: Settings
) -> list[decisions.Finding]:
    shares: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for s in samples:
        key, reason = _gpu_key(s.labels), s.labels.get("reason", "")
        if key is not None and reason in settings.throttle_reasons:
            shares[key][reason] = max(s.value, shares[key].get(reason, 0.0))
    found = []
    for (node, gpu), by_reason in sorted(shares.items()):
        counted = {r: v for r, v in by_reason.items() if v >= settings.throttle_min_fraction}
        if not counted:
            continue
        shown = ", ".join(f"{r} {v:.0%}" for r, v in sorted(counted.items(), key=lambda i: -i[1]))
        found.append(decisions.Finding(
            kind=THROTTLED, node=node, gpu=gpu, reason=decisions.Reason.GPU_THROTTLED,
            evidence=tuple(decisions.Evidence(names.DCGM_CLOCKS_EVENT_REASONS, f"{v:.2f}",
                                              labels={"reason": r}) for r, v in counted.items()),
            detail=f"GPU {gpu} clocks cut: {shown} of the window",
        ))  # fmt: skip
    return found


def _nvlink(samples: Sequence[fleet.MetricSample], settings: Settings) -> list[decisions.Finding]:
    counts: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in samples:
        key = _gpu_key(s.labels)
        if key is not None:
            counts[key][s.labels.get("counter", "")] += s.value
    found = []
    for (node, gpu), by_counter in sorted(counts.items()):
        errors = sum(v for c, v in by_counter.items() if c in NVLINK_CRC_REPLAY)
        recoveries = by_counter.get(NVLINK_RECOVERY, 0.0)
        if errors < settings.nvlink_errors_min and recoveries <= 0:
            continue
        shown = ", ".join(f"{c} +{_about(v)}" for c, v in sorted(by_counter.items()) if v > 0)
        found.append(decisions.Finding(
            kind=NVLINK, node=node, gpu=gpu, reason=decisions.Reason.NVLINK_ERRORS,
            evidence=tuple(decisions.Evidence(f"NVLink {c} errors", f"{_about(v)}")
                           for c, v in sorted(by_counter.items())),
            detail=f"GPU {gpu} NVLink errors in the window: {shown}; one bad link slows every "
                   "GPU of a synchronous job (reseat or replace the link/board)",
        ))  # fmt: skip
    return found


def _about(count: float) -> str:
    """An ``increase()`` for people: Prometheus extrapolates it to the window's ends, so a
    counter's growth is rarely whole (8 link-downs read as 8.14); shown rounded."""
    return f"{count:.0f}" if count >= 1 else f"{count:.2g}"


def _pcie(samples: Sequence[fleet.MetricSample], settings: Settings) -> list[decisions.Finding]:
    found = []
    for s in sorted(samples, key=lambda s: sorted(s.labels.items())):
        key = _gpu_key(s.labels)
        if key is None or s.value < settings.pcie_replays_min:
            continue
        found.append(decisions.Finding(
            kind=PCIE, node=key[0], gpu=key[1], reason=decisions.Reason.PCIE_REPLAYS,
            evidence=(decisions.Evidence(names.DCGM_PCIE_REPLAY, f"+{_about(s.value)}"),),
            detail=f"GPU {key[1]} PCIe link retried {_about(s.value)} times in the window "
                   "(a marginal link: riser, slot or cable)",
        ))  # fmt: skip
    return found


def _ib(samples: Sequence[fleet.MetricSample], minimum: float) -> list[decisions.Finding]:
    ports: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in samples:
        node = node_of(s.labels)
        if node is not None:
            port = f"{s.labels.get('device', '?')}/{s.labels.get('port', '?')}"
            ports[(node, port)][s.labels.get("counter", "")] += s.value
    found = []
    for (node, port), counters in sorted(ports.items()):
        downed = counters.get(IB_DOWNED, 0.0)
        if downed < max(minimum, 1e-9):
            continue
        others = ", ".join(f"{c} +{_about(v)}" for c, v in sorted(counters.items())
                           if c != IB_DOWNED and v > 0)  # fmt: skip
        found.append(decisions.Finding(
            kind=IB_FLAPPING, node=node, gpu=None, reason=decisions.Reason.IB_LINK_FLAPPING,
            evidence=tuple(decisions.Evidence(f"InfiniBand {c}", f"+{_about(v)}",
                                              labels={"port": port})
                           for c, v in sorted(counters.items())),
            detail=f"InfiniBand port {port} went down {_about(downed)} times"
                   + (f" ({others})" if others else "")
                   + "; a flapping port stalls every collective that crosses it",
        ))  # fmt: skip
    return found
