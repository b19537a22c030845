"""``gpuguard manifest job …`` prints exactly the Job the controller creates: the same
builder, the same settings (image, namespace, runtime class), byte for byte as data."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpuguard.actuators import jobs
from gpuguard.catalog import xid as xid_catalog
from gpuguard.cli.main import app
from gpuguard.controller import recovery
from gpuguard.model import annotation_keys, fleet, settings
from tests import fakes
from tests.fakes import FakeJobs, FakeLedger

runner = CliRunner()
ISOLATED_AT = "2026-09-21T06:05:10Z"


def settings_file(tmp_path: Path) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({"controller": {
        "namespace": "gpu-ops", "image": "registry.example/gpuguard:1.2.3",
        "job_runtime_class": "nvidia-cdi"}}))
    return path


def test_the_evidence_manifest_is_the_job_the_recovery_step_creates(tmp_path: Path) -> None:
    config = settings_file(tmp_path)
    printed = runner.invoke(app, ["manifest", "job", "evidence", "--node", "gpu-node-b",
                                  "--isolated-at", ISOLATED_AT, "-c", str(config), "-o", "json"])
    assert printed.exit_code == 0, printed.output
    step_jobs = FakeJobs()
    recovery.Recovery(
        jobs=step_jobs, ledger=FakeLedger(), writer=fakes.FakeWriter(),
        catalog=xid_catalog.load_catalog(), image="registry.example/gpuguard:1.2.3",
        namespace="gpu-ops", runtime_class="nvidia-cdi",
    ).run((fleet.Node("gpu-node-b", "boot-2", 8, 7, unschedulable=True,
                      annotations={annotation_keys.ISOLATED_AT: ISOLATED_AT}),),
          datetime(2026, 9, 21, 6, 10, tzinfo=UTC), may_write=lambda: True)
    assert json.loads(printed.output) == step_jobs.created[0]
    assert step_jobs.created[0]["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia-cdi"


def test_the_burnin_manifest_as_yaml_names_its_gpus_and_mode(tmp_path: Path) -> None:
    printed = runner.invoke(app, ["manifest", "job", "burnin", "--node", "gpu-node-b",
                                  "--gpus", "4", "--mode", "matmul", "--reason", "xid-79",
                                  "-c", str(settings_file(tmp_path))])
    assert printed.exit_code == 0, printed.output
    job = yaml.safe_load(printed.output)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"][1:] == ["burnin", "--summary-file", "/dev/termination-log",
                                        "--expected-gpus", "4", "--mode", "matmul",
                                        "--reason", "xid-79"]
    assert container["image"] == "registry.example/gpuguard:1.2.3"
    assert job["metadata"]["namespace"] == "gpu-ops"
    assert "&id" not in printed.output, "no YAML anchors: the output is reviewed by people"


def test_a_bad_gpu_count_is_one_line_and_exit_2() -> None:
    printed = runner.invoke(app, ["manifest", "job", "burnin", "--node", "n", "--gpus", "0"])
    assert printed.exit_code == 2
    assert "Traceback" not in printed.output


def test_the_gpu_reset_manifest_is_the_job_the_remediation_step_creates() -> None:
    card = "GPU-0a8e0faa-d59d-595d-bf96-0adbb520ef6b"
    printed = runner.invoke(app, ["manifest", "job", "gpu-reset", "--node", "gpu-node-a",
                                  "--uuid", card, "--isolated-at", "2026-01-02T00:00:00Z",
                                  "-o", "json"])  # fmt: skip
    assert printed.exit_code == 0, printed.output
    job = json.loads(printed.output)
    assert job == jobs.gpu_reset_job("gpu-node-a", "2026-01-02T00:00:00Z", uuid=card,
                                     image=settings.GuardSettings().controller.image,
                                     runtime_class="nvidia")  # fmt: skip


def test_a_gpu_reset_of_no_card_is_one_line_and_exit_2() -> None:
    printed = runner.invoke(app, ["manifest", "job", "gpu-reset", "--node", "n", "--uuid",
                                  "GPU-1; reboot"])  # fmt: skip
    assert printed.exit_code == 2
    assert "is not a GPU UUID" in printed.output
    assert "Traceback" not in printed.output
