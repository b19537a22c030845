"""The one rule for external programs the tests need (Debian's ``prometheus`` package:
``prometheus`` and ``promtool``; ``kubernetes-client``: ``kubectl``): ``scripts/test`` installs
them; a test that needs one calls ``require`` — it skips when the program is missing on a
developer's machine and FAILS under ``CI`` (set by CI, and by ``scripts/test``), so a broken
install never passes as a skip."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

PACKAGES = {"prometheus": "prometheus", "promtool": "prometheus", "kubectl": "kubernetes-client"}


def require(binary: str) -> str:
    """The path of ``binary``; skip the test when it is missing, fail when running in CI."""
    path = shutil.which(binary)
    if path is None:
        message = f"{binary} is not installed (Debian package '{PACKAGES[binary]}')"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must have it (scripts/test installs it)")
        pytest.skip(message)
    return path


def promtool_test(tests: dict[str, Any], directory: Path) -> None:
    """Run ``promtool test rules`` on ``tests`` (a unit-test file's content, written under
    ``directory``); fail with promtool's output when any expectation is not met."""
    promtool = require("promtool")
    path = directory / "promtool_test.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
