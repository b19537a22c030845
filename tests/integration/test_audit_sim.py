"""`gpuguard audit` end to end, once: the simulated cluster's Kubernetes API and a real
Prometheus scraping its exporters. A GPU falls off the bus; the audit reports the node still
schedulable with a missing GPU, reads dcgm-exporter coverage from Prometheus, says that no
loaded rule alerts on Xids, and lists what the simulator's API does not serve (Deployments,
PodDisruptionBudgets) as not checked; the HTML report is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app
from gpuguard.sources import prometheus as source
from tests.integration.livesim import live_sim, wait_for

pytestmark = pytest.mark.integration


def test_audit_of_the_simulated_cluster(tmp_path: Path) -> None:
    page = tmp_path / "audit.html"
    with live_sim(tmp_path) as sim:
        lost = wait_for(lambda: sim.node("gpu-node-b")["status"]["allocatable"]
                        ["nvidia.com/gpu"] == "7", sim, timeout_s=30)
        # both nodes' dcgm-exporter series scraped, as the audit's coverage query reads them
        sim.prom.wait_until(f"count({source.node_freshness_query()}) >= 2", timeout_s=30)
        result = CliRunner().invoke(app, [
            "audit", "--kube-server", sim.api.url, "--prometheus-url", sim.prom.url,
            "--html", str(page), "-o", "json"])
    assert lost
    assert result.exit_code == 1, result.output  # findings at medium or above
    rules = {r["rule"]: r for r in json.loads(result.stdout)["rules"]}
    assert [f["objects"] for f in rules["COND-1"]["findings"]] == [["Node/gpu-node-b"]]
    assert rules["DCGM-1"]["status"] == "no-finding"  # both nodes' series are in Prometheus
    assert "no Xid is alerted" in rules["DCGM-2"]["findings"][0]["evidence"]
    assert rules["GANG-1"]["status"] == "no-finding"  # one pod per job in this world
    assert rules["PDB-1"]["status"] == "no-finding"  # PodDisruptionBudgets served, none here
    assert rules["REPAIR-1"]["status"] == "not-checked"  # no node-repair kinds served
    assert "404" in rules["REPAIR-1"]["why"]
    html = page.read_text()
    assert "gpu-node-b" in html
    assert "Not checked (why)" in html
