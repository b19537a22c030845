"""`gpuguard backtest` over a real Prometheus reproduces what the demo's guard did.

Each scenario is played by the demo (the guard ticking against the simulated world); what a
Prometheus would have scraped meanwhile (dcgm-exporter and kube-state-metrics, every 15 s,
nothing while the scenario's Prometheus is down) is recorded, remote-written with staleness
markers into a real Prometheus (Debian's 2.42), and `gpuguard backtest` replays it at the
guard's 30 s tick.
The replay must isolate the same nodes and GPUs, for the same reasons, at the same times as the
demo's guard did — within one tick (the demo's Prometheus finds a change at the next scrape).
The scenarios are played in date order into one history; they are weeks apart, far beyond the
24 h Xid lookback, so none reads another. The breaker case found that the replay dropped the
marks people write (a hold while a card is on order) and so tripped where the guard did not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app
from gpuguard.demo import harness
from gpuguard.model import settings as settings_model
from gpuguard.sim import history, scenario, world
from tests.integration import remote_write

pytestmark = pytest.mark.integration

TICK = timedelta(seconds=30)
QUIET = timedelta(seconds=90)  # below the guard's 2 min staleness bound (settings.prometheus)
# three fast-path node isolations past a breaker that must not count a node held for a person.
# Scenarios whose events run weeks past their duration (ecc-dbe-five, xid79-twice) are played
# to their last event by the demo: recording weeks of scrapes costs minutes, so they are not here.
SCENARIOS = ("small-fleet-two-faults",)


@dataclass(frozen=True)
class Isolation:
    target: str  # a node, or node/GPU index for a GPU isolation
    at: datetime


@dataclass(frozen=True)
class Case:
    name: str
    start: datetime
    end: datetime
    demo: dict[str, datetime]


def _record(recorder: history.HistoryRecorder) -> harness.Observer:
    """Scrape at every step where the world changed, and at least every 90 s between: the
    answers between changes are the same as at a 15 s scrape (the guard reads no gauge that
    drifts on its own), at a fraction of the samples."""
    seen: list[object] = [None, None]

    def observe(w: world.World) -> None:
        if not w.prometheus_up:  # a Prometheus that is down records nothing
            return
        state, last = (w.store.resource_version, len(w.timeline)), seen[1]
        if state != seen[0] or not isinstance(last, datetime) or w.now - last >= QUIET:
            recorder.sample(w.nodes, w.store, w.now)
            seen[:] = [state, w.now]

    return observe


@pytest.fixture(scope="module")
def played(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[list[Case], Path, history.HistoryRecorder]:
    recorder = history.HistoryRecorder()
    cases = []
    specs = sorted((scenario.load_shipped(n) for n in SCENARIOS), key=lambda s: s.start)
    for spec in specs:
        run = harness.play(spec, settings_model.GuardSettings(), observe=_record(recorder))
        demo = dict(run.isolated_at) | dict(run.gpu_isolated_at)
        cases.append(Case(spec.name, spec.start, spec.start + spec.duration, demo))
    return cases, tmp_path_factory.mktemp("backtest-demo"), recorder


def _backtest(url: str, case: Case) -> dict[str, datetime]:
    result = CliRunner().invoke(
        app,
        [
            "backtest", "--prometheus-url", url,
            "--from", case.start.isoformat(), "--to", case.end.isoformat(),
            "--step", "30s", "-o", "json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    first: dict[str, datetime] = {}
    for would in json.loads(result.stdout)["would_isolate"]:
        target = would["node"]
        if "(GPU " in would["fault"]:
            target += "/" + would["fault"].rsplit("(GPU ", 1)[1].rstrip(")")
        first.setdefault(target, datetime.fromisoformat(would["at"]))
    return first


def test_backtest_isolates_what_the_demo_isolated_when_it_did(
    played: tuple[list[Case], Path, history.HistoryRecorder],
) -> None:
    cases, out, recorder = played
    # remote-written with staleness markers, as a Prometheus that scraped the fleet holds it;
    # the scenarios lie months apart, so the out-of-order window spans them all
    with remote_write.served(recorder, out, ooo_window="800d") as prom:
        replayed = {case.name: _backtest(prom.url, case) for case in cases}
    figures = {
        case.name: {
            t: (
                str(case.demo[t] - case.start) if t in case.demo else None,
                str(replayed[case.name][t] - case.start) if t in replayed[case.name] else None,
            )
            for t in sorted(case.demo.keys() | replayed[case.name].keys())
        }
        for case in cases
    }
    print(figures)  # demo vs backtest, offsets from each scenario's start
    for case in cases:
        got = replayed[case.name]
        assert case.demo, f"{case.name}: the demo isolated nothing"
        assert got.keys() == case.demo.keys(), figures[case.name]
        for target, at in case.demo.items():
            assert abs(got[target] - at) <= TICK, (case.name, target, figures[case.name])
