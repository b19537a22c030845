"""A real Prometheus (Debian's ``prometheus`` package) on loopback, for integration tests.

gpuguard's detection is PromQL over real exporters' series, so tests ask the real server
rather than a fake: ``running(config, data_dir)`` starts one on a free loopback port with a
generated config and waits until it is ready; ``from_openmetrics(file, workdir)`` backfills an
OpenMetrics history with ``promtool tsdb create-blocks-from openmetrics`` and serves those
blocks with a long retention, so queries can look days into (simulated) past. Teardown always
stops the process and closes its log and HTTP client (warnings are errors in this suite).

Missing binaries skip the test locally but fail it in CI (``CI`` set), where scripts/test
installs them (``tests.tools.require``, the one rule for external programs). ``binary``
picks the server: Debian's 2.42 (``DEBIAN``) or the Prometheus 3.x of the control-plane
build (``V3``, ``tests.tools.require_built``).
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml

from gpuguard.sim import clock, history, live, scenario, store, world
from tests import tools

START_TIMEOUT_S = 60.0
# The head is compacted into a block once it spans 1.5 minimum block durations (2 h by
# default), in the background, with the out-of-order head after it; a query meanwhile can miss
# some samples (seen on Prometheus 2.42 with remote-written history). A history pushed for a
# test spans hours to months: a minimum block duration longer than any of them keeps it all
# in the head, where queries read it whole. (A hidden flag of the server, "for use in testing".)
KEEP_HEAD = "--storage.tsdb.min-block-duration=100000d"
# How long a wait on scrapes or queries may take: generous, since a loaded 2-core CI machine
# delays scrapes and their commits by seconds; a passing test returns as soon as it holds.
WAIT_S = 60.0


DEBIAN, V3 = "2.42", "3.x"
VERSIONS = (DEBIAN, V3)


def binary(version: str) -> str:
    """The ``prometheus`` of ``version`` (``DEBIAN`` or ``V3``); skip or fail when missing."""
    if version == V3:
        return tools.require_built("prometheus")
    return tools.require("prometheus")


def free_port() -> int:
    """A loopback port that was free a moment ago (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def target_count(config: Mapping[str, Any]) -> int:
    """How many targets ``config``'s static ``scrape_configs`` name (what to wait for)."""
    return sum(
        len(group["targets"])
        for job in config.get("scrape_configs", [])
        for group in job.get("static_configs", [])
    )


class PrometheusError(AssertionError):
    """Prometheus did not start, or answered a query with an error."""


@dataclass
class Prometheus:
    """A running server: its URL, an HTTP client for its API and its log file."""

    url: str
    client: httpx.Client
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def api(self, path: str, **params: Any) -> Any:
        """``data`` of a successful ``/api/v1/<path>`` answer; PrometheusError otherwise."""
        response = self.client.get(f"{self.url}/api/v1/{path}", params=params)
        body = response.json()
        if response.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: HTTP {response.status_code}: {body}")
        return body["data"]

    def query(self, promql: str, at: datetime | float | None = None) -> list[dict[str, Any]]:
        """An instant query's vector (``[{"metric": {...}, "value": [t, "v"]}, ...]``)."""
        params: dict[str, Any] = {"query": promql}
        if at is not None:
            params["time"] = at.timestamp() if isinstance(at, datetime) else at
        data = self.api("query", **params)
        if data["resultType"] != "vector":
            raise PrometheusError(f"{promql!r} answered a {data['resultType']}, not a vector")
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_until(
        self, promql: str, timeout_s: float = WAIT_S, *, series: int = 1
    ) -> list[dict[str, Any]]:
        """Poll ``promql`` until it returns at least ``series`` series; PrometheusError after
        ``timeout_s``.

        A target reads "up" in /api/v1/targets a moment before its scrape's samples are
        committed, so a query about several targets waits for all of them, not the first.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(promql)
            if len(result) >= series:
                return result
            if time.monotonic() > deadline:
                raise PrometheusError(
                    f"{promql!r} had {len(result)}/{series} series after {timeout_s}s\n{self.log()}"
                )
            time.sleep(0.25)

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("targets", state="active")["activeTargets"]
        return active

    def wait_for_targets(self, count: int, timeout_s: float = WAIT_S) -> list[dict[str, Any]]:
        """Wait until ``count`` targets have been scraped successfully and the samples of
        such a scrape are committed (queryable): /api/v1/targets says "up" a moment before
        they are, and a test that then queries one target's series would race its commit."""
        deadline = time.monotonic() + timeout_s
        while True:
            up = [t for t in self.targets() if t["health"] == "up"]
            if len(up) >= count:
                break
            if time.monotonic() > deadline:
                raise PrometheusError(f"{len(up)}/{count} targets up: {self.targets()}")
            time.sleep(0.25)
        self.wait_until("max_over_time(up[1h]) == 1", timeout_s, series=count)
        return up


@contextmanager
def running(
    config: Mapping[str, Any],
    data_dir: Path,
    *,
    retention: str = "15d",
    attempts: int = 3,
    receive_remote_write: bool = False,
    keep_head: bool = False,
    version: str = DEBIAN,
) -> Iterator[Prometheus]:
    """Start Prometheus ``version`` with ``config`` on a free loopback port, storing into
    ``data_dir``; ``receive_remote_write`` opens ``/api/v1/write``
    (``tests.integration.remote_write``); ``keep_head`` keeps every sample in the in-memory
    head (``KEEP_HEAD``).

    A port taken between choosing and binding makes Prometheus exit; that is retried.
    """
    server = binary(version)
    data_dir.mkdir(parents=True, exist_ok=True)
    config_path = data_dir.parent / f"{data_dir.name}-prometheus.yml"
    config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    for attempt in range(1, attempts + 1):
        with ExitStack() as stack:
            prom = stack.enter_context(
                _process(
                    server, config_path, data_dir, retention, free_port(),
                    receive_remote_write, keep_head,
                )
            )
            if prom is not None:
                yield prom
                return
        if attempt == attempts:
            raise PrometheusError(f"Prometheus did not start in {attempts} attempts")


@contextmanager
def _process(
    binary: str,
    config_path: Path,
    data_dir: Path,
    retention: str,
    port: int,
    receive_remote_write: bool = False,
    keep_head: bool = False,
) -> Iterator[Prometheus | None]:
    """One Prometheus process; yields None when it exited before being ready."""
    log_path = data_dir.parent / f"{data_dir.name}-prometheus-{port}.log"
    argv = [
        binary,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={data_dir}",
        f"--storage.tsdb.retention.time={retention}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    if receive_remote_write:
        argv.append("--web.enable-remote-write-receiver")
    if keep_head:
        argv.append(KEEP_HEAD)
    with (
        log_path.open("wb") as log,
        httpx.Client(timeout=10.0) as client,
        subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT) as proc,
    ):
        try:
            prom = Prometheus(f"http://127.0.0.1:{port}", client, log_path)
            yield prom if _wait_ready(proc, prom) else None
        finally:
            live.stop(proc)


def _wait_ready(proc: subprocess.Popen[bytes], prom: Prometheus) -> bool:
    """True once ready; False if it lost the race for its port; PrometheusError otherwise."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            if "address already in use" in prom.log():
                return False
            raise PrometheusError(f"Prometheus exited with {proc.returncode}:\n{prom.log()}")
        try:
            if prom.client.get(f"{prom.url}/-/ready").status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise PrometheusError(f"Prometheus not ready after {START_TIMEOUT_S}s\n{prom.log()}")


def backfill(openmetrics: Path, data_dir: Path) -> str:
    """``promtool tsdb create-blocks-from openmetrics FILE DIR``; returns promtool's report."""
    promtool = tools.require("promtool")
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data_dir)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise PrometheusError(f"promtool failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


@contextmanager
def from_openmetrics(
    openmetrics: Path, workdir: Path, *, retention: str = "3650d"
) -> Iterator[Prometheus]:
    """Backfill ``openmetrics`` into a fresh TSDB under ``workdir`` and serve it (no scrapes)."""
    data_dir = workdir / "tsdb"
    backfill(openmetrics, data_dir)
    with running({"global": {"scrape_interval": "1m"}}, data_dir, retention=retention) as prom:
        yield prom


def played_two_days_ago(
    name: str, out: Path, *, step: timedelta, until: timedelta
) -> tuple[datetime, Path]:
    """Play the shipped scenario ``name`` from two days ago (on a 15 s grid) for ``until``,
    sampling every ``step``; its OpenMetrics history in ``out`` and the world's origin."""
    origin, recorder = recorded_two_days_ago(name, step=step, until=until)
    recorder.write_openmetrics(out)
    return origin, out


def recorded_two_days_ago(
    name: str, *, step: timedelta, until: timedelta
) -> tuple[datetime, history.HistoryRecorder]:
    """Play the shipped scenario ``name`` from two days ago (on a 15 s grid) for ``until``,
    sampling every ``step``: the world's origin and the recorded history."""
    spec = scenario.load_shipped(name)
    real_now = datetime.now(UTC).replace(microsecond=0)
    origin = real_now - timedelta(days=2) - timedelta(seconds=real_now.timestamp() % 15)
    played = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(origin))
    recorder = history.HistoryRecorder()
    played.run(
        step=step, until=until, on_step=lambda w: recorder.sample(w.nodes, w.store, w.clock.now())
    )
    return origin, recorder
