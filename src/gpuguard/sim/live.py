"""The simulated cluster, live: a scenario played on the wall clock (optionally faster), its
Kubernetes API, exporters and a Prometheus scraping them, on loopback — something to point
``kubectl`` and ``gpuguard run`` at (``gpuguard sim serve``).

The scenario starts now: its ``start`` is moved to the wall clock so that what Prometheus
stamps (wall time) and what the world shows agree. ``speed`` runs the scenario's events
faster (60 = a minute of scenario per second); gpuguard's own clock stays the wall clock.
Prometheus is the real one (Debian's ``prometheus`` package) when it is installed: the
queries gpuguard sends are real PromQL, so only a real server answers any of them. Without it
(or when asked), the simulator serves its own answers over Prometheus' HTTP API
(``sim.prometheus_api``): the caller passes the ``Emulation`` that knows gpuguard's queries,
and it is scraped each time the world moves.
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import yaml

from gpuguard.errors import GpuguardError
from gpuguard.sim import (
    clock,
    kubeapi,
    metrics_server,
    prometheus_api,
    scenario,
    state,
    store,
    world,
)


class Scraped(Protocol):
    def scrape(self) -> None: ...


class Synced(Protocol):
    def sync(self) -> None: ...
    def someone_leads(self) -> bool: ...


class RealPlane(Protocol):
    """What a real control plane gives the live cluster (``control_plane.live_plane``)."""

    @property
    def server(self) -> str: ...
    @property
    def kubeconfig(self) -> Path: ...
    @property
    def guard_kubeconfig(self) -> Path: ...
    @property
    def guard_identity(self) -> str: ...
    @property
    def bridge(self) -> Synced: ...


RealFactory = Callable[[world.World, Path], AbstractContextManager[RealPlane]]


# the answers to serve and what to scrape when the world moved, for a world and the lock held
# while it moves
Emulation = Callable[[world.World, threading.Lock], tuple[prometheus_api.Answers, Scraped]]
# the Job controller and kubelet of the simulated nodes, made for the world and its host trees
# (the CLI wires ``sim.kubelet.JobKubelet`` to the demo's job commands): a pass when due
Kubelet = Callable[[world.World, Path], Callable[[], None]]
REAL, SIMULATED = "prometheus", "simulator"  # which Prometheus is served
PLANE_REAL, PLANE_SIMULATED = "real", "simulated"  # which Kubernetes control plane
_STEP = timedelta(seconds=15)  # how far the world moves between scrapes of the emulation

SCRAPE_INTERVAL = "1s"  # fresh answers for a demo; a real cluster scrapes every 15-60 s
_READY_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0


@dataclass
class LiveCluster:
    """What ``serve`` started: the world and the URLs and files that reach it."""

    world: world.World
    kubernetes: str
    metrics: metrics_server.MetricsServer
    prometheus: str | None
    kubeconfig: Path
    speed: float
    started: float  # time.monotonic() when the scenario began
    prometheus_kind: str | None = None  # REAL or SIMULATED; None without one
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    scraped: Scraped | None = None  # the emulation, scraped as the world moves
    # runs gpuguard's Jobs on the simulated nodes; with a real control plane, carries the
    # world to it (control_plane.bridge: its kubelets)
    kubelet: Callable[[], None] | None = None
    control_plane: str = PLANE_SIMULATED  # PLANE_REAL: a real control plane
    guard_kubeconfig: Path | None = None  # with a real one: gpuguard's own identity
    guard_identity: str | None = None  # with a real one: the pod its token is bound to
    leases: Callable[[], bool] | None = None  # with a real one: whether a Lease is stored there

    def catch_up(self) -> list[state.TimelineEntry]:
        """Step the world to now (times ``speed``, at most to the scenario's end); the
        timeline entries that happened since the last call."""
        seen = len(self.world.timeline)
        scenario_time = timedelta(seconds=(time.monotonic() - self.started) * self.speed)
        target = max(self.world.elapsed, min(scenario_time, self.world.end))
        hooks = [h for h in (self.scraped.scrape if self.scraped else None, self.kubelet) if h]

        def after_step(_: world.World) -> None:
            for hook in hooks:
                hook()

        with self.lock:
            if not hooks:
                self.world.step_to(target)
            else:
                self.world.run(step=_STEP, until=target, on_step=after_step)
            if self.kubelet is not None:
                self.kubelet()  # Jobs created since the last step start now
        return self.world.timeline[seen:]

    def someone_leads(self) -> bool:
        """Whether a Lease exists: a ``gpuguard run`` connected and took (or stands by for)
        the lead."""
        if self.leases is not None:
            return self.leases()
        return bool(self.world.store.list("Lease"))

    def resume(self) -> None:
        """Scenario time goes on from where it stands, counted from now (after a pause)."""
        self.started = time.monotonic() - self.world.elapsed.total_seconds() / self.speed

    @property
    def finished(self) -> bool:
        return self.world.elapsed >= self.world.end

    def urls(self) -> dict[str, object]:
        return {
            "kubernetes": self.kubernetes,
            "prometheus": self.prometheus,
            "prometheus_kind": self.prometheus_kind,
            "kubeconfig": str(self.kubeconfig),
            "control_plane": self.control_plane,
            "kube_state_metrics": self.metrics.ksm_url,
            "dcgm_exporter": {n.name: self.metrics.dcgm_url(n.name) for n in self.world.nodes},
        }


class LiveError(GpuguardError):
    """A part of the live cluster did not start (the message says which and why)."""


def starting_now(spec: scenario.Scenario) -> scenario.Scenario:
    """The scenario with its start moved to the current wall-clock second."""
    return dataclasses.replace(spec, start=datetime.now(UTC).replace(microsecond=0))


@contextmanager
def serve(
    spec: scenario.Scenario,
    workdir: Path,
    *,
    speed: float = 1.0,
    host: str = "127.0.0.1",
    kube_port: int = 0,
    with_prometheus: bool = True,
    emulation: Emulation | None = None,
    prefer_emulation: bool = False,
    kubelet: Kubelet | None = None,
    real: RealFactory | None = None,
) -> Iterator[LiveCluster]:
    """Start everything, yield the live cluster, stop everything on exit. Prometheus: the real
    one where installed (unless ``prefer_emulation``), else ``emulation``'s answers.
    ``kubelet``: the nodes run gpuguard's Jobs (their host trees under ``workdir/hosts``).
    Kubernetes: the simulator's own API, or with ``real`` a real control plane the world is
    carried to (whose kubelets then run the Jobs, under the same host trees)."""
    spec = starting_now(spec)
    objects = store.ObjectStore()
    hosts = workdir / "hosts" if kubelet is not None or real is not None else None
    played = world.World.from_scenario(spec, objects, clock.SimClock(spec.start),
                                       hosts_root=hosts)
    with ExitStack() as stack:
        metrics = stack.enter_context(metrics_server.serve(played, host=host))
        if real is None:
            api = stack.enter_context(kubeapi.serve(objects, host=host, port=kube_port))
            config_path = workdir / "kubeconfig"
            config_path.write_text(kubeconfig(api.url, spec.name))
            cluster = LiveCluster(played, api.url, metrics, None, config_path, speed, 0.0)
            if kubelet is not None and hosts is not None:
                cluster.kubelet = kubelet(played, hosts)
        else:
            plane = stack.enter_context(real(played, workdir))
            cluster = LiveCluster(played, plane.server, metrics, None, plane.kubeconfig, speed,
                                  0.0, kubelet=plane.bridge.sync, control_plane=PLANE_REAL,
                                  guard_kubeconfig=plane.guard_kubeconfig,
                                  guard_identity=plane.guard_identity,
                                  leases=plane.bridge.someone_leads)
        installed = shutil.which("prometheus") is not None and not prefer_emulation
        if with_prometheus and (installed or emulation is None):
            config: dict[str, Any] = {"global": {"scrape_interval": SCRAPE_INTERVAL,
                                 "evaluation_interval": SCRAPE_INTERVAL}}
            config |= metrics_server.scrape_config(metrics.url, played.nodes)
            cluster.prometheus = stack.enter_context(
                prometheus(config, workdir / "prometheus", host))
            cluster.prometheus_kind = REAL
        elif with_prometheus and emulation is not None:
            answers, cluster.scraped = emulation(played, cluster.lock)
            cluster.scraped.scrape()
            cluster.prometheus = stack.enter_context(prometheus_api.serve(answers, host)).url
            cluster.prometheus_kind = SIMULATED
        cluster.started = time.monotonic()
        yield cluster


def kubeconfig(server: str, name: str) -> str:
    """A kubeconfig for the simulator: plain HTTP on loopback, no credentials."""
    context = f"gpuguard-sim-{name}"
    return yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server}}],
        "users": [{"name": context, "user": {}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    }, sort_keys=False)


@contextmanager
def prometheus(config: dict[str, Any], data_dir: Path, host: str) -> Iterator[str]:
    """Run Debian's ``prometheus`` with ``config`` on a free port; yields its URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise LiveError("prometheus is not installed (Debian package 'prometheus'); "
                        "use --no-prometheus to serve without one")
    data_dir.mkdir(parents=True, exist_ok=True)
    config_path = data_dir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = _free_port(host)
    log_path = data_dir / "prometheus.log"
    argv = [binary, f"--config.file={config_path}", f"--storage.tsdb.path={data_dir / 'tsdb'}",
            f"--web.listen-address={host}:{port}"]
    with log_path.open("wb") as log, subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT
    ) as proc:
        try:
            url = f"http://{host}:{port}"
            _wait_ready(proc, url, log_path)
            yield url
        finally:
            stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate ``proc`` and wait for it; kill it when it does not exit in time."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
            raise LiveError(f"prometheus exited with {proc.returncode}: {' '.join(tail)} "
                            f"(log: {log_path})")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise LiveError(f"prometheus not ready after {_READY_TIMEOUT_S:.0f}s (log: {log_path})")
