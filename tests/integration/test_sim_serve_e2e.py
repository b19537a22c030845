"""``gpuguard sim serve`` as a user runs it: the simulated cluster live in one process,
``kubectl`` (Debian's kubernetes-client) and ``gpuguard run`` pointed at the URLs it prints,
and a GPU that falls off the bus isolated live."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests import tools, waits
from tests.processes import GPUGUARD, first_line, process

READY_TIMEOUT_S = 60.0
ISOLATE_TIMEOUT_S = 60.0


def kubectl(kubeconfig: str, *args: str) -> str:
    done = subprocess.run([tools.require("kubectl"), "--kubeconfig", kubeconfig, *args],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.integration
def test_serve_then_kubectl_and_gpuguard_run_isolate_a_fault_live(tmp_path: Path) -> None:
    tools.require("prometheus")
    tools.require("kubectl")
    serve = [*GPUGUARD, "sim", "serve", "xid79-twice", "--speed", "60", "--dir", str(tmp_path),
             "--json"]
    with process(serve) as sim:
        ready = json.loads(first_line(sim))
        assert set(ready) >= {"kubernetes", "prometheus", "kubeconfig"}
        kc = ready["kubeconfig"]
        names = kubectl(kc, "get", "nodes,pods,jobs,leases,events", "-A", "-o", "name")
        assert "node/gpu-node-b" in names.splitlines()
        assert "pod/train-llm-a" in names.splitlines()
        run = [*GPUGUARD, "run", "--kubeconfig", kc, "--prometheus-url", ready["prometheus"],
               "--metrics-port", "0"]
        with process(run, env={"GPUGUARD_CONTROLLER__INTERVAL": "1s"}) as guard:

            def cordoned(node: str) -> str:
                return kubectl(kc, "get", "node", node, "-o", "jsonpath={.spec.unschedulable}")

            isolated = waits.eventually(lambda: cordoned("gpu-node-b") == "true",
                                        ISOLATE_TIMEOUT_S, every_s=0.5)
            assert guard.poll() is None, guard.communicate()[1]
        assert isolated
        assert cordoned("gpu-node-a") == ""
        shown = {line.split()[0]: line.split()[1]
                 for line in kubectl(kc, "get", "nodes").splitlines()[1:]}
        assert shown == {"gpu-node-a": "Ready", "gpu-node-b": "Ready,SchedulingDisabled"}
        reason = kubectl(kc, "get", "node", "gpu-node-b", "-o",
                         "jsonpath={.metadata.annotations.gpuguard\\.io/reason}")
        assert reason == "xid-79"
        events = kubectl(kc, "get", "events", "-A", "-o", "json")
        assert any(e["involvedObject"]["name"] == "gpu-node-b"
                   for e in json.loads(events)["items"])
