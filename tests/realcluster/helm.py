"""gpuguard's chart through the real Helm (the pinned build): template, lint, install."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuguard.sim.control_plane import cluster

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpuguard"
RELEASE = "gpuguard"
NAMESPACE = "gpuguard"


def run(bin_dir: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run helm; its stdout, or an AssertionError with its stderr."""
    done = subprocess.run(
        [str(bin_dir / "helm"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr.strip()[-3000:]}"
    return done.stdout


def install(plane: cluster.ControlPlane, *sets: str) -> str:
    """`helm install` the chart into the plane (creating namespace gpuguard), waiting for none
    of its pods: there are no kubelets to run them."""
    flags = [f"--set={s}" for s in sets]
    return run(
        plane.bin_dir,
        "install",
        RELEASE,
        str(CHART),
        f"--kubeconfig={plane.kubeconfig}",
        f"--namespace={NAMESPACE}",
        "--create-namespace",
        *flags,
        env=_helm_env(plane),
    )


def _helm_env(plane: cluster.ControlPlane) -> dict[str, str]:
    home = plane.folder / "helm"
    return {
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
    }
