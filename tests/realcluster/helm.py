"""gpuguard's chart through the real Helm (the pinned build): lint, template, install."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuguard.sim.control_plane import chart, cluster

CHART = chart.chart_dir()
RELEASE = chart.RELEASE
NAMESPACE = chart.NAMESPACE


def run(bin_dir: Path, *args: str) -> str:
    """Run helm without a cluster; its stdout, or an AssertionError with its stderr."""
    done = subprocess.run(
        [str(bin_dir / "helm"), *args], capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr.strip()[-3000:]}"
    return done.stdout


def install(plane: cluster.ControlPlane) -> None:
    chart.install(plane)
