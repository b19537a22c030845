"""``gpuguard sim serve`` with gpuguard's Jobs run by its nodes, the whole chain live: the GPU
that falls off the bus is isolated, the evidence Job runs there and its verdict is recorded,
the node is power cycled, the burn-in Job runs on the new boot, and the node returns to the
pool — each seen as a user watching ``kubectl get nodes,jobs`` sees it, with ``gpuguard run``
and the simulator in processes of their own (the simulator's own Prometheus answers)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuguard.sim import scenario
from tests import tools
from tests.processes import GPUGUARD, first_line, process

pytestmark = pytest.mark.integration
SPEED = 60  # a scenario minute per second: the power cycle at 20 minutes comes after 20 s
CHAIN_TIMEOUT_S = 240.0
PREFIX = "gpuguard.io/"


def xid79_power_cycled_soon(folder: Path) -> Path:
    """xid79-twice's first fall, with its power cycle 20 minutes later instead of 4 days (the
    chain is the same; the wait is not)."""
    shipped = scenario.load_shipped("xid79-twice")
    assert any(e.kind == "power_cycle" for e in shipped.events)  # the shape borrowed here
    text = {
        "name": "xid79-power-cycled-soon",
        "start": "2026-09-10T13:00:00Z",
        "duration": "6h",
        "fleet": {"nodes": ["gpu-node-a", "gpu-node-b"], "gpus_per_node": 8,
                  "model": "NVIDIA GeForce RTX 5090", "driver": "580.126.09"},
        "events": [
            {"at": "0s", "workload": {"node": "gpu-node-a", "gpus": 4, "profile": "training",
                                      "name": "train-llm-a"}},
            {"at": "3m59s", "xid": {"node": "gpu-node-b", "gpu": 4, "xid": 79}},
            {"at": "3m59s", "gpu_lost": {"node": "gpu-node-b", "gpu": 4}},
            {"at": "20m", "power_cycle": {"node": "gpu-node-b"}},
        ],
    }  # fmt: skip
    path = folder / "xid79-power-cycled-soon.yaml"
    path.write_text(yaml.safe_dump(text))
    return path


def kubectl_json(kubeconfig: str, *args: str) -> Any:
    done = subprocess.run(
        [tools.require("kubectl"), "--kubeconfig", kubeconfig, *args, "-o", "json"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def seen_now(kubeconfig: str) -> set[str]:
    """The chain's steps visible now on gpu-node-b and gpuguard's Jobs."""
    node = kubectl_json(kubeconfig, "get", "node", "gpu-node-b")
    marks = node["metadata"].get("annotations") or {}
    ours = {k for k in marks if k.startswith(PREFIX)}
    cordoned = bool(node["spec"].get("unschedulable"))
    seen = set()
    if cordoned and marks.get(f"{PREFIX}reason") == "xid-79":
        seen.add("isolated")
    if marks.get(f"{PREFIX}verdict") == "power-cycle":
        seen.add("verdict power-cycle")
    boot = marks.get(f"{PREFIX}boot-id")
    if boot and node["status"]["nodeInfo"]["bootID"] != boot:
        seen.add("power cycled")
    for job in kubectl_json(kubeconfig, "get", "jobs", "-n", "gpuguard")["items"]:
        kind = job["metadata"]["name"].split("-")[1]  # gpuguard-<kind>-<node>-<hash>
        if (job.get("status") or {}).get("succeeded"):
            seen.add(f"{kind} Job succeeded")
    if not cordoned and not ours:
        seen.add("returned")
    return seen


def test_sim_serve_runs_the_whole_chain_from_isolation_to_return(tmp_path: Path) -> None:
    serve = [*GPUGUARD, "sim", "serve", str(xid79_power_cycled_soon(tmp_path)), "--speed",
             str(SPEED), "--start-paused", "--sim-prometheus", "--dir", str(tmp_path / "sim"),
             "--json"]  # fmt: skip
    with process(serve) as sim:
        ready = json.loads(first_line(sim))
        assert ready.get("prometheus_kind") == "simulator"
        kc = ready["kubeconfig"]
        run = [*GPUGUARD, "run", "--kubeconfig", kc, "--prometheus-url", ready["prometheus"],
               "--metrics-port", "0"]
        seen: list[str] = []  # each step once, in the order first seen
        a_cordoned = False
        with process(run, env={"GPUGUARD_CONTROLLER__INTERVAL": "1s"}) as guard:
            deadline = time.monotonic() + CHAIN_TIMEOUT_S
            while "returned" not in seen and time.monotonic() < deadline:
                now = seen_now(kc)
                if "isolated" in seen or "isolated" in now:  # returned is after isolation
                    seen += [step for step in sorted(now) if step not in seen]
                a_cordoned |= bool(
                    kubectl_json(kc, "get", "node", "gpu-node-a")["spec"].get("unschedulable")
                )
                time.sleep(0.5)
            assert guard.poll() is None, guard.communicate()[1][-2000:]
        ledger = subprocess.run(
            [*GPUGUARD, "ledger", "list", "--kubeconfig", kc, "-o", "json"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert set(seen) >= {"isolated", "evidence Job succeeded", "verdict power-cycle",
                         "power cycled", "burnin Job succeeded", "returned"}, seen
    for before, after in [("isolated", "evidence Job succeeded"),
                          ("evidence Job succeeded", "power cycled"),
                          ("verdict power-cycle", "power cycled"),
                          ("power cycled", "burnin Job succeeded"),
                          ("burnin Job succeeded", "returned")]:  # fmt: skip
        assert seen.index(before) <= seen.index(after), seen
    assert not a_cordoned  # the healthy node is never touched
    assert ledger.returncode == 0, ledger.stderr
    lines = json.loads(ledger.stdout)
    verdicts = [(line["node"], line["fault"], line["verdict"]) for line in lines]
    assert ("gpu-node-b", "xid-79", "power-cycle") in verdicts
