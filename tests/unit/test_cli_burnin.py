"""``gpuguard burnin``: exit codes, the loud CPU-mode note, JSON shape, the termination summary
and flag validation (the command is mounted on a bare Typer app until main.py registers it)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpuguard.agent.burnin import cuda, hardware
from gpuguard.cli import burnin
from tests.builders import HEALTHY, FakeBackend

app = typer.Typer()
app.command("burnin")(burnin.burnin)
app.command("help")(lambda: None)  # a second command keeps "burnin" a subcommand

CPU = ["--device", "cpu", "--size", "8", "--duration", "0.05s"]


def gpuguard(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    outcome = CliRunner(env={"COLUMNS": "160", **(env or {})}).invoke(app, ["burnin", *args])
    return outcome.exit_code, outcome.stdout, outcome.stderr


@pytest.fixture
def eight_gpus(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    backend = FakeBackend([HEALTHY] * 8)
    monkeypatch.setattr(cuda, "load", lambda: backend)
    return backend


def test_cpu_mode_says_it_is_not_a_burnin_result_and_exits_1() -> None:
    code, stdout, stderr = gpuguard(*CPU, "--expected-gpus", "1")
    assert code == 1
    assert "CPU mode: not a burn-in result" in stderr
    assert "CPU mode: not a burn-in result" in stdout
    assert "NOT PASSED" in stdout


def test_json_report_shape() -> None:
    code, stdout, _ = gpuguard(*CPU, "--expected-gpus", "1", "--json")
    assert code == 1
    document = json.loads(stdout)
    assert set(document) >= {
        "mode", "device", "gpus", "expected_gpus", "found_gpus", "ratio_min_max", "checks",
        "passed", "note",
    }  # fmt: skip
    assert set(document["gpus"][0]) >= {"index", "name", "tflops", "fraction_of_expected", "error"}
    assert document["note"].startswith("CPU mode: not a burn-in result")
    assert all(set(check) == {"check", "status", "evidence"} for check in document["checks"])


def test_summary_is_compact_json_within_4000_bytes() -> None:
    code, stdout, _ = gpuguard(*CPU, "--expected-gpus", "1", "--summary")
    assert code == 1
    assert len(stdout.strip().encode()) <= 4000
    assert json.loads(stdout)["passed"] is False


def test_passing_node_exits_0_with_expected_count_from_the_environment(
    eight_gpus: FakeBackend,
) -> None:
    code, stdout, _ = gpuguard("--json", env={"GPUGUARD_EXPECTED_GPUS": "8"})
    assert code == 0, stdout
    document = json.loads(stdout)
    assert (document["found_gpus"], document["expected_gpus"], document["passed"]) == (8, 8, True)


def test_missing_gpu_exits_1(eight_gpus: FakeBackend) -> None:
    code, stdout, _ = gpuguard("--expected-gpus", "9")
    assert code == 1
    assert "found 8 of 9 expected GPUs" in stdout


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_cuda_without_torch_exits_2_saying_so() -> None:
    code, _, stderr = gpuguard("--expected-gpus", "8")
    assert code == 2
    assert "PyTorch" in stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        pytest.param(["--reason", "ecc"], "--reason", id="reason-not-xid"),
        pytest.param(["--duration", "ninety"], "--duration", id="duration-garbage"),
        pytest.param(["--duration", "0s"], "--duration", id="duration-zero"),
        pytest.param(["--floor", "1.5"], "--floor", id="floor-above-1"),
        pytest.param(["--dtype", "fp8"], "--dtype", id="dtype-unsupported"),
        pytest.param(["--json", "--summary"], "--summary", id="json-and-summary"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(args: list[str], named: str) -> None:
    code, _, stderr = gpuguard(*CPU, *args)
    assert code == 2
    assert named in stderr


def test_memory_mode_without_dcgm_or_torch_is_unknown_not_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")

    def unavailable() -> hardware.Backend:
        raise hardware.BackendUnavailable("PyTorch is not installed")

    monkeypatch.setattr(cuda, "load", unavailable)
    code, stdout, _ = gpuguard("--reason", "xid-48", "--expected-gpus", "8", "--json")
    assert code == 1
    document = json.loads(stdout)
    assert document["mode"] == "memory"
    assert {c["check"]: c["status"] for c in document["checks"]}["memory-test"] == "UNKNOWN"


def test_help_teaches_with_examples() -> None:
    outcome = CliRunner(env={"COLUMNS": "120"}).invoke(app, ["burnin", "--help"])
    assert outcome.exit_code == 0
    assert "Examples:" in outcome.stdout
    assert "TENS OF MINUTES" in outcome.stdout


def test_summary_file_is_where_the_job_leaves_its_result(tmp_path: Path) -> None:
    from gpuguard.demo import job_commands

    target = tmp_path / "termination-log"
    result = CliRunner().invoke(
        app,
        [
            "burnin",
            "--device",
            "cpu",
            "--duration",
            "0.2s",
            "--size",
            "16",
            "--expected-gpus",
            "1",
            "--summary-file",
            str(target),
        ],
    )
    assert result.exit_code in (0, 1), result.output
    summary = json.loads(target.read_text())
    assert "passed" in summary
    assert len(target.read_bytes()) <= 4000
    argv = ["gpuguard", "burnin", "--summary"]
    assert job_commands.termination_message(argv, "{}") == ""  # stdout is no termination log
