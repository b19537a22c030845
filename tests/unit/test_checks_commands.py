"""The real CommandRunner: exit codes and output, a hard timeout, never an exception."""

from __future__ import annotations

import sys
import time

from gpuguard.agent import commands


def test_returns_exit_code_and_output() -> None:
    script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    outcome = commands.SubprocessRunner().run([sys.executable, "-c", script], timeout_s=10)
    assert (outcome.returncode, outcome.stdout, outcome.stderr) == (3, "out\n", "err\n")
    assert not outcome.timed_out


def test_timeout_kills_and_reports_timed_out_quickly() -> None:
    started = time.monotonic()
    outcome = commands.SubprocessRunner().run(
        [sys.executable, "-c", "import time; time.sleep(600)"], timeout_s=0.3
    )
    assert outcome.timed_out
    assert time.monotonic() - started < 60  # killed, not waited for (a loaded machine: slow)


def test_missing_program_is_a_result_not_an_exception() -> None:
    outcome = commands.SubprocessRunner().run(["gpuguard-no-such-program"], timeout_s=1)
    assert outcome.returncode == commands.NOT_STARTED
    assert "gpuguard-no-such-program" in outcome.stderr
