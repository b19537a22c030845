"""gpuguard's own commands as a user starts them, in a process of their own, stopped (then
killed) at the end of the ``with``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

GPUGUARD = [sys.executable, "-m", "gpuguard.cli.main"]


@contextmanager
def process(argv: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, **(env or {})}) as proc:
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def first_line(proc: subprocess.Popen[str]) -> str:
    """The first line the process printed; if it ended without one, AssertionError with its
    exit status and what it wrote on stderr (the one line gpuguard prints on a failure)."""
    assert proc.stdout is not None
    assert proc.stderr is not None
    line = proc.stdout.readline()
    if line:
        return line
    code = proc.wait(timeout=15)
    raise AssertionError(f"{proc.args!r} printed nothing; exit {code}: {proc.stderr.read()}")
