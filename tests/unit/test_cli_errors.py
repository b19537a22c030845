"""Every command × bad inputs: one line on stderr naming the input, exit 2 for bad input and 1
for a dependency that failed, never a traceback (``--debug`` shows it)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app
from gpuguard.sim import clock, kubeapi, scenario, store, world
from tests import cli_commands

BAD_INPUT, FAILED = 2, 1
NO_PROM = "http://127.0.0.1:9"  # discard port: nothing listens on loopback


@dataclass(frozen=True)
class Case:
    argv: str  # formatted with the fixture's paths and URLs, then split on spaces
    code: int
    names: str  # the input the one line must name
    env: tuple[tuple[str, str], ...] = ()


CASES: dict[str, Case] = {
    # no cluster configured: the first thing a new user runs
    **{
        f"{cmd.split()[0]}-no-kubeconfig": Case(cmd, BAD_INPUT, "--kubeconfig")
        for cmd in (
            "status", "once --dry-run", "explain gpu-node-a", "ledger list", "hygiene",
            "gate gpu-node-a", "run", "breaker reset --dry-run",
        )
    },
    **{
        f"{cmd.split()[0]}-kubeconfig-missing": Case(f"{cmd} --kubeconfig /nope", BAD_INPUT,
                                                     "/nope")
        for cmd in ("status", "once", "explain gpu-node-a", "ledger list", "hygiene", "run")
    },
    "status-kubeconfig-not-yaml": Case("status --kubeconfig {binary}", BAD_INPUT, "{binary}"),
    "status-api-unreachable": Case("status --kube-server http://127.0.0.1:9", FAILED,
                                   "127.0.0.1:9"),
    "status-api-answers-html": Case("status --kube-server {html}", FAILED, "Nodes"),
    "status-prometheus-unreachable": Case(
        f"status --kube-server {{api}} --prometheus-url {NO_PROM}", FAILED, "127.0.0.1:9"),
    "explain-prometheus-unreachable": Case(
        f"explain {{node}} --kube-server {{api}} --prometheus-url {NO_PROM}", FAILED,
        "127.0.0.1:9"),
    "once-prometheus-url-malformed": Case(
        "once --kube-server {api} --prometheus-url http://[::1", BAD_INPUT, "http://[::1"),
    # settings files and variables
    "status-settings-binary": Case("status --config {binary}", BAD_INPUT, "{binary}"),
    "status-settings-missing": Case("status --config /nope.yaml", BAD_INPUT, "/nope.yaml"),
    "status-settings-section-scalar": Case("status --config {scalar}", BAD_INPUT, "isolation"),
    "status-xid-overrides-missing": Case("status --config {overrides} --kube-server {api}",
                                         BAD_INPUT, "/nonexistent"),
    "once-duration-without-unit": Case("once --kube-server {api}", BAD_INPUT,
                                       "GPUGUARD_ISOLATION__HOLD_WINDOW",
                                       (("GPUGUARD_ISOLATION__HOLD_WINDOW", "5"),)),
    "demo-env-bad-list": Case("demo --scenario xid79-twice", BAD_INPUT,
                              "GPUGUARD_ISOLATION__FAST_PATH_XIDS",
                              (("GPUGUARD_ISOLATION__FAST_PATH_XIDS", "79,x"),)),
    "run-log-level": Case("run --log-level bogus --kube-server {api}", BAD_INPUT, "--log-level"),
    "run-metrics-port": Case("run --metrics-port 99999 --kube-server {api}", BAD_INPUT,
                             "--metrics-port"),
    # scenarios
    "sim-run-binary-scenario": Case("sim run {binary}", BAD_INPUT, "{binary}"),
    "sim-run-unknown-scenario": Case("sim run no-such-scenario", BAD_INPUT, "no-such-scenario"),
    "sim-run-at-overflow": Case("sim run {far}", BAD_INPUT, "99999999d"),
    "sim-run-hosts-is-a-file": Case("sim run xid79-twice --hosts {binary}", BAD_INPUT,
                                    "{binary}"),
    "demo-binary-scenario": Case("demo --scenario {binary}", BAD_INPUT, "{binary}"),
    # node-side commands
    "agent-port-in-use": Case("agent --node n --kernel-log {kernlog} --state-dir {state} "
                              "--listen 127.0.0.1 --port {busy}", BAD_INPUT, "port"),
    "agent-state-dir-unusable": Case("agent --node n --kernel-log {kernlog} --state-dir /proc/x",
                                     BAD_INPUT, "/proc/x"),
    "agent-kernel-log-missing": Case("agent --node n --kernel-log /nonexistent --state-dir "
                                     "{state}", BAD_INPUT, "/nonexistent"),
    "agent-xid-overrides-bad-class": Case("agent --node n --kernel-log {kernlog} --state-dir "
                                          "{state} --xid-overrides {classes}", BAD_INPUT,
                                          "{classes}: classes entry 48"),
    "agent-xid-overrides-missing": Case("agent --node n --kernel-log {kernlog} --state-dir "
                                        "{state} --xid-overrides /nonexistent", BAD_INPUT,
                                        "/nonexistent"),
    "check-root-missing": Case("check --root /nonexistent", BAD_INPUT, "/nonexistent"),
    "evidence-root-missing": Case("evidence --root /nonexistent", BAD_INPUT, "/nonexistent"),
    "xid-parse-missing": Case("xid parse /nonexistent", BAD_INPUT, "/nonexistent"),
    "xid-explain-not-a-number": Case("xid explain abc", BAD_INPUT, "CODE"),
    "backtest-empty-range": Case(f"backtest --prometheus-url {NO_PROM} --from now --to now-1d",
                                 BAD_INPUT, "--from"),
    "backtest-prometheus-unreachable": Case(f"backtest --prometheus-url {NO_PROM} --from now-1h",
                                            FAILED, "127.0.0.1:9"),
    "ledger-export-format": Case("ledger export -o bogus --kube-server {api}", BAD_INPUT,
                                 "bogus"),
    "unknown-option": Case("status --bogus", BAD_INPUT, "--bogus"),
    "burnin-duration-without-unit": Case("burnin --device cpu --duration soon", BAD_INPUT,
                                         "--duration"),
    "phantom-prometheus-unreachable": Case(f"phantom --prometheus-url {NO_PROM}", FAILED,
                                           "127.0.0.1:9"),
    "utilization-prometheus-malformed": Case("utilization --prometheus-url http://[::1",
                                             BAD_INPUT, "http://[::1"),
    "sim-list-format": Case("sim list -o xml", BAD_INPUT, "xml"),
    "ledger-add-no-kubeconfig": Case(
        "ledger add --node gpu-node-b --xid 79 --pci 0000:99:00.0 "
        "--uuid GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d --at 2026-09-10T13:03:59Z",
        BAD_INPUT, "--kubeconfig"),
    "ledger-remove-api-unreachable": Case(
        "ledger remove --id 3f2a9c01b7de --why x --by sre --kube-server http://127.0.0.1:9", FAILED,
        "127.0.0.1:9"),
    "sim-serve-unknown-scenario": Case("sim serve no-such-scenario", BAD_INPUT, "no-such-scenario"),
    "sim-serve-port-in-use": Case("sim serve xid79-twice --no-prometheus --port {busy}",
                                  BAD_INPUT, "--port {busy}"),
    "sim-serve-speed-zero": Case("sim serve xid79-twice --speed 0", BAD_INPUT, "--speed"),
    "sim-serve-dir-unusable": Case("sim serve xid79-twice --dir /proc/x", BAD_INPUT, "/proc/x"),
}


class _Html(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><body>login required</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("inputs")
    binary = tmp / "binary.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    (tmp / "scalar.yaml").write_text("isolation: 5\n")
    (tmp / "overrides.yaml").write_text("controller:\n  xid_overrides: /nonexistent\n")
    (tmp / "classes.yaml").write_text("classes:\n  48: broken\n")
    (tmp / "far.yaml").write_text(
        "name: far\nduration: 1h\nfleet: {nodes: [a], gpus_per_node: 1}\n"
        "events:\n  - at: 99999999d\n    xid: {node: a, gpu: 0, xid: 79}\n"
    )
    (tmp / "kern.log").write_text("")
    html = ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    threading.Thread(target=html.serve_forever, daemon=True).start()
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    spec = scenario.load_shipped("xid79-twice")
    objects = store.ObjectStore()
    world.World.from_scenario(spec, objects, clock.SimClock(spec.start))
    with kubeapi.serve(objects) as api:
        yield {
            "binary": str(binary), "scalar": str(tmp / "scalar.yaml"),
            "overrides": str(tmp / "overrides.yaml"), "classes": str(tmp / "classes.yaml"),
            "far": str(tmp / "far.yaml"),
            "kernlog": str(tmp / "kern.log"), "state": str(tmp / "state"),
            "html": f"http://127.0.0.1:{html.server_address[1]}", "api": api.url,
            "busy": str(busy.getsockname()[1]), "node": spec.node_names[0],
        }
    html.shutdown()
    html.server_close()
    busy.close()


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A user with no kubeconfig, outside any pod, no gpuguard settings in the environment."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NODE_NAME", "POD_NAME"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_cluster")
@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_with_an_exit_code(name: str, inputs: dict[str, str]) -> None:
    case = CASES[name]
    argv = case.argv.format(**inputs).split()
    result = CliRunner(env={"COLUMNS": "80", **dict(case.env)}).invoke(app, argv)
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr + result.stdout
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert case.names.format(**inputs) in lines[0]
    assert result.exit_code == case.code, lines[0]


@pytest.mark.parametrize("command", cli_commands.leaf_commands())
def test_every_command_refuses_an_unknown_flag_in_one_line(command: str) -> None:
    result = CliRunner().invoke(app, [*command.split(), "--no-such-flag"])
    assert result.exit_code == BAD_INPUT
    assert result.stderr.strip().splitlines() == [
        f"error: No such option: --no-such-flag (see 'gpuguard {command} --help')"
    ]


@pytest.mark.usefixtures("no_cluster")
def test_debug_shows_the_traceback() -> None:
    result = CliRunner().invoke(app, ["--debug", "status", "--kubeconfig", "/nope"])
    assert result.exit_code == BAD_INPUT
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: --kubeconfig /nope")


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith("gpuguard ")
