"""``gpuguard agent``: flags rejected with exit 2, and a real process that stops on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from gpuguard.agent import position
from gpuguard.cli import agent
from gpuguard.sim import kernel_lines

APP = typer.Typer()
APP.command()(agent.agent)
LAUNCH = "import typer; from gpuguard.cli import agent; typer.run(agent.agent)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--node", "n", "--check-interval", "soon"], "--check-interval",
                     id="interval-not-a-duration"),
        pytest.param(["--node", "n", "--check-interval", "0s"], "longer than 0s",
                     id="interval-zero"),
        pytest.param(["--node", "n", "--check-interval", "500ms"], "at least 1s",
                     id="interval-under-a-second"),
        pytest.param(["--node", "n", "--kmsg", "--journal"], "choose one",
                     id="two-log-sources"),
        pytest.param(["--check-interval", "5m"], "NODE_NAME", id="no-node-name"),
        pytest.param(["--node", "n", "--allowed-dns", "8.8.8.8/33"], "--allowed-dns",
                     id="bad-resolver-cidr"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(args: list[str], message: str) -> None:
    outcome = CliRunner(env={"COLUMNS": "200", "NODE_NAME": ""}).invoke(APP, args)
    assert outcome.exit_code == 2
    assert message in outcome.output


def test_help_teaches_with_examples() -> None:
    outcome = CliRunner(env={"COLUMNS": "200"}).invoke(APP, ["--help"])
    assert outcome.exit_code == 0
    assert "gpuguard agent --kernel-log /var/log/kern.log" in outcome.output
    assert "--no-report-conditions" in outcome.output  # node conditions: on unless turned off


def test_agent_process_serves_metrics_and_saves_state_then_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(kernel_lines.xid("0000:99:00.0", 79) + "\n")
    port = _free_port()
    argv = [sys.executable, "-c", LAUNCH, "--node", "gpu-node-b", "--root", str(tmp_path),
            "--kernel-log", str(log), "--state-dir", str(tmp_path / "state"),
            "--port", str(port), "--listen", "127.0.0.1", "--check-interval", "1h"]
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as process:
        try:
            body = _scrape(f"http://127.0.0.1:{port}/metrics", 'xid="79"} 1.0')
        finally:
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert b"node conditions not reported: no in-cluster service-account token" in stderr
    assert 'gpuguard_check_status{check="nvidia-match"' in body
    assert position.load(tmp_path / "state").counts["xids"][0][-1] == 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _scrape(url: str, needle: str) -> str:
    deadline = time.monotonic() + 60  # a Python process starting on a loaded machine
    with httpx.Client() as client:
        while time.monotonic() < deadline:
            try:
                body = client.get(url).text
            except httpx.TransportError:
                body = ""
            if needle in body and "gpuguard_check_status" in body:
                return body
            time.sleep(0.1)
    raise AssertionError(f"{needle!r} never served at {url}")
