"""One overall deadline per command (``cli.deadline``): against an API server or a Prometheus
that accepts the connection and never answers, a command ends at its ``--deadline`` with one
line naming what it waited on, exit 1 — not after each of its reads' own 10 s timeouts."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import typer.main
from typer.testing import CliRunner

import gpuguard.cli
from gpuguard.cli import deadline
from gpuguard.cli.main import app

LIMIT_S = 4.0
SLACK_S = 2.0  # the exit after the deadline (closing the client), on a loaded machine


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An HTTP server that accepts every connection and never answers a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for connection in held:
        connection.close()
    listener.close()


@pytest.mark.parametrize(
    ("command", "waited_on"),
    [
        (["status"], "the Kubernetes API (listing Nodes)"),
        (["ledger", "list"], "the Kubernetes API (listing ledger ConfigMaps in gpuguard)"),
        (["audit"], "the Kubernetes API (listing Nodes)"),
    ],
    ids=["status", "ledger-list", "audit"],
)
def test_a_command_against_an_api_server_that_never_answers_ends_at_its_deadline(
    silent_server: str, command: list[str], waited_on: str
) -> None:
    began = time.monotonic()
    result = CliRunner().invoke(
        app, ["--deadline", f"{LIMIT_S:g}s", *command, "--kube-server", silent_server]
    )
    took = time.monotonic() - began
    assert result.exit_code == 1
    name = " ".join(command)
    assert result.output == (
        f"error: gpuguard {command[0]}: no result within its {LIMIT_S:g}s deadline "
        f"(--deadline, GPUGUARD_DEADLINE); it was waiting on {waited_on}\n"
    ), name
    assert LIMIT_S - 0.5 < took < LIMIT_S + SLACK_S  # each read alone would wait 10 s


def test_a_prometheus_that_never_answers_is_named_with_its_url(silent_server: str) -> None:
    result = CliRunner().invoke(
        app, ["--deadline", "2s", "phantom", "--prometheus-url", silent_server]
    )
    assert result.exit_code == 1
    assert result.output.startswith("error: gpuguard phantom: no result within its 2s deadline")
    assert f"it was waiting on Prometheus ({silent_server}/api/v1/query, query '" in result.output


def test_the_deadline_is_disarmed_when_the_command_ends() -> None:
    result = CliRunner().invoke(app, ["--deadline", "30s", "ledger", "--help"])
    assert result.exit_code == 0
    assert deadline.signal.getitimer(deadline.signal.ITIMER_REAL) == (0.0, 0.0)
    assert deadline.signal.getsignal(deadline.signal.SIGALRM) is deadline.signal.SIG_DFL


@pytest.mark.parametrize(
    "value", ["0s", "15", "inf", "2h"], ids=["zero", "no-unit", "inf", "past-1h"]
)
def test_a_bad_deadline_is_refused_naming_the_flag(value: str) -> None:
    result = CliRunner().invoke(app, ["--deadline", value, "status"])
    assert result.exit_code == 2
    assert "--deadline" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_an_invocation_in_a_running_program_counts_from_its_own_start() -> None:
    """The deadline of ``gpuguard`` run as a program counts from the process's start (its
    imports included); the app invoked later in a running program (this test's runner, long
    after the import) counts from the invocation, never from the import."""
    deadline.begin(process=True)
    assert deadline._START.at == gpuguard.cli.STARTED
    deadline.begin(process=False)
    assert time.monotonic() - deadline._START.at < 1


def test_every_command_given_a_deadline_is_one_of_gpuguards() -> None:
    """A renamed command would silently lose its deadline."""
    group = typer.main.get_group(app)
    assert set(group.commands) >= deadline.COMMANDS
