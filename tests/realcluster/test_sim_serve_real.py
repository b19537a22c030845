"""``gpuguard sim serve xid79-twice --control-plane real`` as a user runs it: the simulated
fleet carried to a real control plane (chart installed by Helm), the printed ``gpuguard run``
with gpuguard's own ServiceAccount token, and the whole first loop on real controllers —
isolation, the evidence Job made into a pod by the real Job controller, run by the node's
simulated kubelet on its host tree, its verdict read back."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from gpuguard.sim.control_plane import cluster
from tests import tools, waits
from tests.processes import GPUGUARD, first_line, process

VERDICT_TIMEOUT_S = 90.0


def test_sim_serve_on_the_real_control_plane_isolates_collects_evidence_and_names_the_repair(
    bin_dir: Path, tmp_path: Path
) -> None:
    tools.require("prometheus")
    serve = [
        *GPUGUARD,
        "sim",
        "serve",
        "xid79-twice",
        "--control-plane",
        "real",
        "--speed",
        "60",
        "--dir",
        str(tmp_path),
        "--json",
    ]
    with process(serve) as sim:
        ready = json.loads(first_line(sim))
        assert ready.get("control_plane") == "real"
        admin = ready["kubeconfig"]
        env = dict(
            word.split("=", 1)
            for word in shlex.split(ready["run"])
            if "=" in word and not word.startswith("-")
        )
        run = [
            *GPUGUARD,
            *[w for w in shlex.split(ready["run"]) if "=" not in w][1:],
            "--metrics-port",
            "0",
        ]
        assert "gpuguard.kubeconfig" in " ".join(run)  # gpuguard's identity, not the admin's

        def annotation(key: str) -> str:
            return kubectl(
                bin_dir,
                admin,
                "get",
                "node",
                "gpu-node-b",
                "-o",
                f"jsonpath={{.metadata.annotations.gpuguard\\.io/{key}}}",
            )

        with process(run, env=env) as guard:
            named = waits.eventually(
                lambda: annotation("verdict") != "", VERDICT_TIMEOUT_S, every_s=1.0
            )
            assert guard.poll() is None, guard.communicate()[1][-2000:]
        assert named, kubectl(bin_dir, admin, "get", "jobs,pods", "-n", "gpuguard")
        assert annotation("verdict") == "power-cycle"
        assert annotation("reason") == "xid-79"
        assert (
            kubectl(
                bin_dir, admin, "get", "node", "gpu-node-a", "-o", "jsonpath={.spec.unschedulable}"
            )
            == ""
        )
        jobs = json.loads(kubectl(bin_dir, admin, "get", "jobs", "-n", "gpuguard", "-o", "json"))
        (evidence,) = jobs["items"]
        assert [c["type"] for c in evidence["status"]["conditions"] if c["status"] == "True"] == [
            "SuccessCriteriaMet",
            "Complete",
        ]


def kubectl(bin_dir: Path, kubeconfig: str, *args: str) -> str:
    done = subprocess.run(
        [str(bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        raise cluster.ControlPlaneError(f"kubectl {' '.join(args)}: {done.stderr}")
    return done.stdout
