"""The one rule for external programs the tests need (Debian's ``prometheus`` package:
``prometheus`` and ``promtool``; ``kubernetes-client``: ``kubectl``; and the pinned build of
``scripts/control-plane build``: the real control plane, Helm and Prometheus 3.x):
``scripts/test`` installs and builds them; a test that needs one calls ``require`` (or
``require_built``) — it skips when the program is missing on a developer's machine and FAILS
under ``CI`` (set by CI, and by ``scripts/test``), so a broken install never passes as a
skip."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

PACKAGES = {"prometheus": "prometheus", "promtool": "prometheus", "kubectl": "kubernetes-client"}


def require(binary: str) -> str:
    """The path of ``binary``; skip the test when it is missing, fail when running in CI."""
    path = shutil.which(binary)
    if path is None:
        missing(f"{binary} is not installed (Debian package '{PACKAGES[binary]}')")
    return path


def require_built(tool: str) -> str:
    """The path of ``tool`` in the control-plane build; skip when not built, fail in CI."""
    from gpuguard.sim.control_plane import versions

    path = versions.bin_dir() / tool
    if not path.is_file():
        missing(f"{tool} is not built in {path.parent} (scripts/control-plane build)")
    return str(path)


def missing(message: str) -> NoReturn:
    """Skip (a developer's machine) or fail (CI) for a missing program."""
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must have it (scripts/test installs and builds it)")
    pytest.skip(message)


def promtool_test(tests: dict[str, Any], directory: Path) -> None:
    """Run ``promtool test rules`` on ``tests`` (a unit-test file's content, written under
    ``directory``); fail with promtool's output when any expectation is not met."""
    promtool = require("promtool")
    path = directory / "promtool_test.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
