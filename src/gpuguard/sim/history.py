"""Recorded exporter output over simulated time, written as OpenMetrics for backfill.

A live Prometheus only sees the present. Seed incidents span days (a GPU off the bus for
three days; "compare with 24 h ago"), so the simulator records what Prometheus *would* have
scraped at each simulated instant and writes it as OpenMetrics with timestamps, for
``promtool tsdb create-blocks-from openmetrics``. Samples carry the ``job``/``instance``
labels Prometheus adds when it scrapes the targets of ``metrics_server.scrape_config``, plus
an ``up`` series per target, so queries read the same live and backfilled.

promtool (and the OpenMetrics grammar) need each family's samples together, each series'
samples together and in time order, and ``# EOF`` at the end; counters not named ``*_total``
(dcgm's remapped rows) are typed ``unknown``, because OpenMetrics names counter samples
``<family>_total``.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TextIO, TypeAlias

from gpuguard.sim import exporters, fleet_exporters, metrics_server, state, store

UP = "up"
_Points: TypeAlias = "tuple[array[float], array[float]]"  # timestamps (s), values


class HistoryRecorder:
    """Scrape results at increasing simulated times, kept compactly per series.

    ``interval`` is the scrape interval: ``sample`` calls closer than that to the last
    recorded one are skipped, so a world stepping every 15 s can be recorded every minute
    (a 12-day, 16-GPU scenario at 15 s is ~34 M samples and an ~8.7 GiB file).
    """

    def __init__(self, *, interval: timedelta = timedelta(0), fleet_health: bool = False) -> None:
        self._interval = interval
        self._fleet_health = fleet_health  # also what the live endpoints add (fleet_exporters)
        self._meta: dict[str, tuple[str, str]] = {UP: ("gauge", "")}  # name -> (kind, help)
        self._series: dict[str, dict[exporters.Labels, _Points]] = {}
        self._last: datetime | None = None

    @property
    def sample_count(self) -> int:
        return sum(len(ts) for fam in self._series.values() for ts, _ in fam.values())

    @property
    def series_count(self) -> int:
        return sum(len(fam) for fam in self._series.values())

    def series(self) -> Iterator[tuple[str, exporters.Labels, array[float], array[float]]]:
        """Every recorded series: (name, labels, timestamps in s, values), in time order."""
        for name in sorted(self._series):
            for labels, (times, values) in sorted(self._series[name].items()):
                yield name, labels, times, values

    def sample(
        self, nodes: Iterable[state.SimNode], objects: store.ObjectStore, now: datetime
    ) -> bool:
        """Record every endpoint as Prometheus would scrape it at simulated time ``now``;
        False when skipped (less than ``interval`` after the last recorded scrape)."""
        if self._last is not None and now <= self._last:
            raise ValueError(f"history samples must move forward: {now} after {self._last}")
        if self._last is not None and now < self._last + self._interval:
            return False
        for node in nodes:
            self._scrape_dcgm(node, objects, now)
        ksm = metrics_server.target_labels(metrics_server.KSM_JOB)
        self.add(exporters.ksm_families(objects, now), ksm, now, up=True)
        self._last = now
        return True

    def _scrape_dcgm(self, node: state.SimNode, objects: store.ObjectStore, now: datetime) -> None:
        target = metrics_server.target_labels(metrics_server.DCGM_JOB, node.name)
        node_target = metrics_server.target_labels(metrics_server.NODE_JOB, node.name)
        up = exporters.exporter_up(node, now)  # both endpoints answer 503 while it is down
        if self._fleet_health:
            ib = fleet_exporters.node_exporter_families(node, now) if up else []
            self.add(ib, node_target, now, up=up)
        if not up:
            self.add([], target, now, up=False)
            return
        pods = exporters.pods_by_gpu(node, objects, now)
        families = exporters.dcgm_families(node, pods, now, xid_count_metric=node.xid_count_metric)
        if self._fleet_health:
            families += fleet_exporters.dcgm_health_families(node, now)
        self.add(families, target, now, up=True)

    def add(
        self,
        families: Iterable[exporters.Family],
        target: dict[str, str],
        now: datetime,
        *,
        up: bool,
    ) -> None:
        """Record one scrape of one target: its families and its ``up`` sample."""
        t = now.timestamp()
        self._append(UP, scraped_labels((), target), t, 1.0 if up else 0.0)
        for family in families:
            self._meta.setdefault(family.name, (family.kind, family.help))
            for s in family.samples:
                self._append(family.name, scraped_labels(s.labels, target), t, float(s.value))

    def _append(self, name: str, labels: exporters.Labels, t: float, value: float) -> None:
        points = self._series.setdefault(name, {}).get(labels)
        if points is None:
            points = (array("d"), array("d"))
            self._series[name][labels] = points
        points[0].append(t)
        points[1].append(value)

    def write_openmetrics(
        self, path: Path, *, start: datetime | None = None, end: datetime | None = None
    ) -> int:
        """Write OpenMetrics text promtool can backfill from, optionally only the samples in
        [start, end]; returns the number of samples written."""
        window = (
            float("-inf") if start is None else start.timestamp(),
            float("inf") if end is None else end.timestamp(),
        )
        written = 0
        with path.open("w", encoding="utf-8") as out:
            for name in sorted(self._series):
                written += self._write_family(out, name, window)
            out.write("# EOF\n")
        return written

    def _write_family(self, out: TextIO, name: str, window: tuple[float, float]) -> int:
        kind, help_text = self._meta[name]
        family, om_type = openmetrics_type(name, kind)
        out.write(f"# TYPE {family} {om_type}\n")
        if help_text:
            out.write(f"# HELP {family} {_escape_help(help_text)}\n")
        written = 0
        for labels, (times, values) in sorted(self._series[name].items()):
            lo, hi = bisect.bisect_left(times, window[0]), bisect.bisect_right(times, window[1])
            head = name + exporters.format_labels(labels)
            out.writelines(
                f"{head} {exporters.format_value(values[i])} {format_timestamp(times[i])}\n"
                for i in range(lo, hi)
            )
            written += hi - lo
        return written


def scraped_labels(labels: exporters.Labels, target: dict[str, str]) -> exporters.Labels:
    """A sample's labels after a scrape without ``honor_labels``: the target's labels win and
    a clashing exporter label is kept as ``exported_<name>``; sorted like Prometheus."""
    merged = {(f"exported_{k}" if k in target else k): v for k, v in labels}
    merged.update(target)
    return tuple(sorted(merged.items()))


def openmetrics_type(name: str, kind: str) -> tuple[str, str]:
    """(family name, OpenMetrics type) for a sample name and its exposition type."""
    if kind == "counter":
        if name.endswith("_total"):
            return name.removesuffix("_total"), "counter"
        return name, "unknown"
    return name, kind


def format_timestamp(t: float) -> str:
    """Seconds, with milliseconds only when there are any (Prometheus keeps ms)."""
    ms = round(t * 1000)
    return str(ms // 1000) if ms % 1000 == 0 else f"{ms / 1000:.3f}"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
