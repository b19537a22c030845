"""``sim serve``: with ``--start-paused`` the live scenario holds at its first instant until a
``gpuguard run`` connects (its Lease appears), then runs on from there — no fault fires before
the guard watches; and its nodes run gpuguard's Jobs as kubelets would."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from gpuguard.cli import sim_serve
from gpuguard.cli.main import app
from gpuguard.model import settings
from gpuguard.sim import live, scenario


def test_the_scenario_waits_for_the_lease_then_runs_on_from_its_first_instant(
    tmp_path: Path,
) -> None:
    spec = scenario.load_shipped("xid79-twice")
    with live.serve(spec, tmp_path, speed=3600, with_prometheus=False) as cluster:
        cluster.catch_up()
        assert not cluster.someone_leads()
        cluster.started -= 10  # ten wall seconds pass: ten scenario hours at x3600 ...
        cluster.world.store.create("Lease", "gpuguard", {
            "metadata": {"name": "gpuguard-leader"}, "spec": {"holderIdentity": "run-1"}})
        assert cluster.someone_leads()
        cluster.resume()  # ... but it was paused: time runs on from its first instant
        cluster.catch_up()
        assert cluster.world.elapsed.total_seconds() < 3600
        time.sleep(0.01)
        cluster.catch_up()
        assert cluster.world.elapsed.total_seconds() > 0


def test_the_live_nodes_run_gpuguards_jobs(tmp_path: Path) -> None:
    """``sim serve`` wires the simulated kubelet: an evidence Job pinned to a node runs there
    and completes (``kubectl get jobs,pods -w`` shows it), as in the demo."""
    manifest = CliRunner().invoke(app, ["manifest", "job", "evidence", "--node", "gpu-node-b",
                                        "-o", "json"])
    job = json.loads(manifest.stdout)
    spec = scenario.load_shipped("xid79-twice")
    kubelet = sim_serve._job_kubelet(settings.GuardSettings())
    with live.serve(spec, tmp_path, speed=3600, with_prometheus=False,
                    kubelet=kubelet) as cluster:
        cluster.catch_up()
        cluster.world.store.create("Job", "gpuguard", job)
        deadline = time.monotonic() + 20
        while not _complete(cluster) and time.monotonic() < deadline:
            time.sleep(0.05)
            cluster.catch_up()
        assert _complete(cluster)
        (pod,) = [p for p in cluster.world.store.list("Pod", "gpuguard")
                  if p["metadata"]["name"].startswith(job["metadata"]["name"])]
        assert (pod["spec"]["nodeName"], pod["status"]["phase"]) == ("gpu-node-b", "Succeeded")


def _complete(cluster: live.LiveCluster) -> bool:
    (job,) = cluster.world.store.list("Job", "gpuguard")
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Complete" for c in conditions)
