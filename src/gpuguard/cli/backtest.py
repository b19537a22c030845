"""``gpuguard backtest``: replay the isolation policy over recorded Prometheus history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from gpuguard.catalog import xid as xid_catalog
from gpuguard.cli import guard, inputs, output
from gpuguard.controller import backtest as replaying
from gpuguard.errors import InputError, SourceError
from gpuguard.model import bounds, durations
from gpuguard.model import settings as settings_model
from gpuguard.sources import prometheus


def parse_instant(text: str, now: datetime, *, flag: str) -> datetime:
    """ISO 8601 (``2026-09-21T05:00:00Z``), ``now``, or ``now-30d``."""
    raw = text.strip()
    if raw == "now":
        return now
    if raw.startswith("now-"):
        try:
            return now - bounds.duration(raw.removeprefix("now-"))
        except InputError as e:
            raise InputError(f"{flag} {text}: {e}") from e
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as e:
        raise InputError(f"{flag}: expected ISO time, 'now' or 'now-30d'; got {text!r}") from e
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def backtest(
    prometheus_url: Annotated[str, typer.Option(help="Prometheus base URL holding the history.")],
    start: Annotated[str, typer.Option("--from", help="ISO time, or now-30d.")] = "now-7d",
    end: Annotated[str, typer.Option("--to", help="ISO time, or now.")] = "now",
    step: Annotated[timedelta, typer.Option(
        parser=inputs.duration(), metavar=inputs.DURATION, show_default="1m",
        help="Replay step (the guard's tick).",
    )] = timedelta(minutes=1),
    config: guard.ConfigOpt = None,
    fmt: guard.FormatOpt = output.Format.TABLE,
) -> None:
    """Replay the isolation policy over recorded history, acting on nothing, and print what
    it would have isolated and when: "would this policy have caught last month's incidents,
    and how many false cordons?".

    Node state comes from kube-state-metrics; instants with missing or stale data are
    counted as undecided, never guessed.

    Example: gpuguard backtest --prometheus-url http://prometheus:9090 --from now-30d --step 1m
    """
    settings = guard.load_settings(config)
    now = datetime.now(UTC)
    t1 = parse_instant(start, now, flag="--from")
    t2 = parse_instant(end, now, flag="--to")
    _check_range(t1, t2, step, start, end)
    guard.check_url(prometheus_url, "--prometheus-url")
    report = _run(prometheus_url, settings, t1, t2, step)
    data = _as_data(report)
    if not output.emit(data, fmt):
        _print(report)
    if report.instants == report.undecided:
        raise SourceError(
            f"no instant could be replayed from {prometheus_url}"
            + (f": {report.first_error}" if report.first_error else "")
        )


def _check_range(t1: datetime, t2: datetime, step: timedelta, start: str, end: str) -> None:
    """A range to replay, at most ``inputs.REPLAY_RANGE`` long and of a bounded number of
    steps (each is a Prometheus query): InputError naming the flag otherwise."""
    if t1 >= t2:
        raise InputError(f"--from {start} is not before --to {end}: nothing to replay")
    if t2 - t1 > inputs.REPLAY_RANGE:
        longest = durations.format_duration(inputs.REPLAY_RANGE)
        raise InputError(f"--from {start} --to {end}: longer than {longest}; replay at most "
                         f"{longest} at a time (e.g. --from now-{longest})")
    if (t2 - t1) / step > inputs.REPLAY_INSTANTS:
        raise InputError(f"--step {durations.format_duration(step)}: more than "
                         f"{inputs.REPLAY_INSTANTS} instants in the range; take a longer step")


def _run(
    url: str,
    settings: settings_model.GuardSettings,
    t1: datetime,
    t2: datetime,
    step: timedelta,
) -> replaying.BacktestReport:
    plan = prometheus.QueryPlan(
        hold_window=settings.isolation.hold_window, xid_lookback=settings.isolation.xid_lookback
    )
    source = prometheus.PrometheusSource(
        url,
        plan,
        staleness=settings.prometheus.staleness,
        timeout_s=settings.prometheus.timeout.total_seconds(),
        scopes=settings.prometheus.scrape_scope,
    )
    classifier = xid_catalog.load_catalog(settings.controller.xid_overrides)
    try:
        instants = output.progress(
            source.history(t1, t2, step), lambda instant: f"{instant[0]:%Y-%m-%d %H:%M}",
            total=int((t2 - t1) / step) + 1,
        )
        return replaying.replay(instants, classifier, settings)
    except SourceError as e:
        raise SourceError(f"--prometheus-url {url}: {e}") from e
    finally:
        source.close()


def _as_data(report: replaying.BacktestReport) -> dict[str, Any]:
    return {
        "instants": report.instants,
        "undecided": report.undecided,
        "first_error": report.first_error,
        "would_isolate": [
            {
                "at": i.at.isoformat(),
                "node": i.node,
                "fault": i.fault,
                "reason": str(i.reason),
                "detail": i.detail,
                "evidence": list(i.evidence),
            }
            for i in report.isolations
        ],
        "findings": dict(report.findings),
    }


def _print(report: replaying.BacktestReport) -> None:
    output.table(
        f"would isolate: {len(report.isolations)} node(s)",
        ["at", "node", "fault", "reason", "detail"],
        [
            [f"{i.at:%Y-%m-%d %H:%M:%S}Z", i.node, i.fault, str(i.reason), i.detail]
            for i in report.isolations
        ],
    )
    output.console.print(
        f"{report.instants} instants replayed, {report.undecided} without usable data"
        + (f" (first: {report.first_error})" if report.first_error else "")
    )


