"""``gpuguard sim serve SCENARIO``: the simulated cluster live on loopback, to watch gpuguard
work — point ``kubectl`` and ``gpuguard run`` at the URLs it prints."""

from __future__ import annotations

import enum
import json
import signal
import tempfile
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer

from gpuguard.cli import failures, guard, inputs, output, sim
from gpuguard.demo import job_commands, live_prometheus
from gpuguard.model import durations
from gpuguard.model import settings as settings_model
from gpuguard.sim import kubelet, live, state, world
from gpuguard.sim.control_plane import live_plane

_TICK_S = 0.2  # how often the world catches up with the clock
_MIN_SCALED_HOLD = timedelta(minutes=1)  # two steps of the hold-window query (sources.prometheus)


class ControlPlane(enum.StrEnum):
    SIMULATED = "simulated"
    REAL = "real"


def serve(
    scenario_ref: sim.ScenarioArg,
    speed: Annotated[float, typer.Option(
        parser=inputs.number(0.001, 100_000), metavar="FACTOR",
        help="Scenario time per second of wall time: 60 = a minute per second.",
    )] = 1.0,
    port: Annotated[int, typer.Option(
        min=0, max=65535, help="Port of the Kubernetes API (0 = any free port).",
    )] = 0,
    workdir: Annotated[Path | None, typer.Option(
        "--dir", help="Where to write the kubeconfig and Prometheus' data (default: a temp dir).",
    )] = None,
    with_prometheus: Annotated[bool, typer.Option(
        "--prometheus/--no-prometheus",
        help="Serve a Prometheus: the real one scraping the exporters where installed, else "
        "the simulator's own answers to gpuguard's queries.",
    )] = True,
    sim_prometheus: Annotated[bool, typer.Option(
        "--sim-prometheus", help="Serve the simulator's own answers even where prometheus is "
        "installed (they answer only gpuguard's queries, with the settings given here).",
    )] = False,
    config: guard.ConfigOpt = None,
    control_plane: Annotated[ControlPlane, typer.Option(
        "--control-plane", case_sensitive=False,
        help="simulated: the simulator's own Kubernetes API (pip-only). real: a real "
        "kube-apiserver, controller-manager and scheduler with gpuguard's chart installed by "
        "Helm, built once by `scripts/control-plane build` (a checkout of the repository).",
    )] = ControlPlane.SIMULATED,
    start_paused: Annotated[bool, typer.Option(
        "--start-paused", help="Hold the scenario at its first instant until a gpuguard run "
        "connects (its Lease appears), so no fault fires before it watches.",
    )] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON line with the URLs once ready, then nothing.",
    )] = False,
) -> None:
    """Serve SCENARIO's cluster live on 127.0.0.1: its Kubernetes API (kubectl works), its
    dcgm-exporter and kube-state-metrics endpoints, a Prometheus scraping them, and a
    kubeconfig; the scenario runs on the wall clock times --speed until Ctrl-C.

    The nodes run gpuguard's Jobs (evidence, GPU isolation, burn-in) as kubelets would.

    \b
    Watch gpuguard isolate a GPU that falls off the bus, take the evidence, and (after the
    scenario's power cycle) burn the node in and return it:
      gpuguard sim serve xid79-twice --speed 3600 --start-paused
      kubectl --kubeconfig KUBECONFIG get nodes,jobs,pods -A -w
      GPUGUARD_CONTROLLER__INTERVAL=1s gpuguard run --kubeconfig KUBECONFIG \\
        --prometheus-url PROMETHEUS
    (it prints that last command ready to paste)
    """
    spec = sim.load_or_exit(scenario_ref)
    settings = guard.load_settings(config)
    with tempfile.TemporaryDirectory(prefix="gpuguard-sim-") as scratch:
        folder = workdir or Path(scratch)
        _check_dir(folder)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        emulation = live_prometheus.answers_for(settings, speed)
        real = _real_plane if control_plane is ControlPlane.REAL else None
        with failures.listening("--port", port), live.serve(
            spec, folder, speed=speed, kube_port=port, with_prometheus=with_prometheus,
            emulation=emulation, prefer_emulation=sim_prometheus,
            kubelet=_job_kubelet(settings), real=real,
        ) as cluster:
            happened = cluster.catch_up()  # the scenario's first instant, before anyone looks
            _announce(cluster, spec.name, as_json, settings, config)
            if start_paused and not _wait_for_gpuguard(cluster, stop, quiet=as_json):
                return
            while True:
                for entry in [] if as_json else happened:
                    _print_entry(entry)
                if stop.wait(_TICK_S):
                    break
                happened = cluster.catch_up()


def _real_plane(played: world.World, folder: Path) -> AbstractContextManager[live.RealPlane]:
    """The real control plane, its simulated kubelets running Jobs as the demo's do."""
    assert played.hosts_root is not None
    return live_plane.serve(played, folder, job_commands.runner(played, played.hosts_root))


def _job_kubelet(settings: settings_model.GuardSettings) -> live.Kubelet:
    """The simulated nodes run gpuguard's Jobs (evidence, GPU isolation, burn-in) as the
    demo's do: ``kubectl get jobs,pods -w`` shows them start and end."""

    def make(played: world.World, hosts: Path) -> Callable[[], None]:
        jobs = kubelet.JobKubelet(played, job_commands.runner(
            played, hosts, settings.controller.xid_overrides))
        return jobs.step

    return make


def _wait_for_gpuguard(cluster: live.LiveCluster, stop: threading.Event, *, quiet: bool) -> bool:
    """Hold scenario time until a gpuguard run's Lease appears; False when stopped first."""
    if not quiet:
        output.console.print("paused at the scenario's first instant: start gpuguard run")
    while not cluster.someone_leads():
        if stop.wait(_TICK_S):
            return False
    cluster.resume()
    if not quiet:
        output.console.print("gpuguard run connected (its Lease is there): the scenario runs")
    return True


def _check_dir(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise typer.BadParameter(f"{folder}: {e.strerror or e}", param_hint="--dir") from e


_PROMETHEUS_KIND = {
    live.REAL: "a real prometheus scraping the exporters",
    live.SIMULATED: "the simulator's own answers to gpuguard's queries; other PromQL is refused",
}


def run_command(
    cluster: live.LiveCluster, settings: settings_model.GuardSettings, config: Path | None
) -> str:
    """The ``gpuguard run`` to start against the live cluster (docs/design.md#sim-serve).

    gpuguard keeps the wall clock whatever --speed says: it ticks every second here. A real
    Prometheus stamps wall time, so at --speed N the hold window is scaled to N times shorter
    (at least two of the hold query's 30 s steps, so the window still holds points); the
    simulator's own answers map each query to scenario time, so there the settings stay as
    ``sim serve`` was given them (the queries must be the same text)."""
    env = ["GPUGUARD_CONTROLLER__INTERVAL=1s"]
    if cluster.prometheus_kind == live.REAL and cluster.speed > 1:
        scaled = max(settings.isolation.hold_window / cluster.speed, _MIN_SCALED_HOLD)
        env.append(f"GPUGUARD_ISOLATION__HOLD_WINDOW={durations.format_duration(scaled)}")
    flags = [f"--config {config}"] if config else []
    kubeconfig = cluster.guard_kubeconfig or cluster.kubeconfig  # gpuguard's own, where real
    flags += [f"--kubeconfig {kubeconfig}", f"--prometheus-url {cluster.prometheus}"]
    if cluster.guard_identity:  # the Lease names the pod the token is bound to (gpuguard-leader)
        flags.append(f"--identity {cluster.guard_identity}")
    return " ".join([*env, "gpuguard run", *flags])


def _announce(
    cluster: live.LiveCluster,
    name: str,
    as_json: bool,
    settings: settings_model.GuardSettings,
    config: Path | None,
) -> None:
    urls = cluster.urls()
    if cluster.prometheus:
        urls["run"] = run_command(cluster, settings, config)
    if as_json:
        typer.echo(json.dumps(urls))
        return
    con = output.console
    con.print(output.bold(f"{name}: the simulated cluster is live"),
              f" (scenario time x{cluster.speed:g}; gpuguard's own clock stays the wall clock)",
              sep="")
    con.print(f"  kubernetes:  {urls['kubernetes']}")
    kind = _PROMETHEUS_KIND.get(cluster.prometheus_kind or "", "")
    con.print(f"  prometheus:  {urls['prometheus'] or '- (--no-prometheus)'}"
              + (f" ({kind})" if kind else ""))
    con.print(f"  kubeconfig:  {urls['kubeconfig']}")
    con.print(f"  exporters:   {urls['kube_state_metrics']}, dcgm-exporter per node")
    con.print("try:")
    con.print(f"  kubectl --kubeconfig {urls['kubeconfig']} get nodes -w")
    if cluster.prometheus:
        con.print(f"  {urls['run']}")
    con.print("the world's timeline follows; Ctrl-C stops it")


def _print_entry(entry: state.TimelineEntry) -> None:
    output.console.print(f"{sim.offset_text(entry.t):>10}  {entry.kind:<16} "
                         f"{entry.node or '-':<14} {entry.detail}")
