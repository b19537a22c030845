"""The real CommandRunner: run a program with a hard timeout, never raise, never hang.

``subprocess.run(timeout=...)`` kills the child on timeout but then waits for it without a
limit; a process stuck in D state (nvidia-smi on a hung driver, the incident library and the
lifecycle report) would hang the agent with it. Here the child gets its own process group, the whole
group is killed on timeout, and the final wait is itself bounded: a child that will not die is
abandoned, not waited for.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence

from gpuguard.model import ports

REAP_GRACE_S = 2.0
NOT_STARTED = 127  # the shell's "command not found"


class SubprocessRunner:
    """``ports.CommandRunner`` on the local machine, with ``LC_ALL=C`` for parseable output."""

    def run(self, argv: Sequence[str], *, timeout_s: float) -> ports.CommandResult:
        command = tuple(argv)
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
                env={**os.environ, "LC_ALL": "C"},
            )
        except OSError as e:
            return ports.CommandResult(command, NOT_STARTED, "", f"{command[0]}: {e.strerror}")
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return _kill(process, command)
        return ports.CommandResult(command, process.returncode, stdout, stderr)


def _kill(process: subprocess.Popen[str], command: tuple[str, ...]) -> ports.CommandResult:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        stdout, stderr = process.communicate(timeout=REAP_GRACE_S)
    except subprocess.TimeoutExpired:
        stdout, stderr = "", "did not exit after SIGKILL (uninterruptible?); abandoned"
    return ports.CommandResult(command, None, stdout, stderr)
