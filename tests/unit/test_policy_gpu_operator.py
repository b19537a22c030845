"""The GPU Operator route (docs/gpu-isolation.md#gpu-operator): on a node the operator manages,
gpuguard switches the operator's device plugin off with its operand label, waits until the
operator removed the plugin's pod, re-applies when the label or the count is lost, and removes
the label when the last GPU returns."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from gpuguard.cli.main import app
from gpuguard.model import annotation_keys, fleet, gpu_isolation
from gpuguard.policy import gpu_enforcement as policy
from gpuguard.policy import gpu_route

NOW = datetime(2026, 8, 11, 9, 0, tzinfo=UTC)
CARD = "GPU-0a8e0faa"
OPERAND = gpu_isolation.OPERATOR_DEVICE_PLUGIN_LABEL
OPERATOR_LABELS = {"nvidia.com/gpu.deploy.driver": "true",
                   "nvidia.com/gpu.deploy.container-toolkit": "true"}
Step = policy.Step


def applied() -> gpu_isolation.IsolatedGpu:
    fresh = gpu_isolation.IsolatedGpu(CARD, "0000:2a:00.0", "1", NOW - timedelta(hours=5),
                                      "xid-48", capacity=4)
    return fresh.applied("boot-1", NOW - timedelta(hours=4), "", confirmed=True)


def operator_node(
    *entries: gpu_isolation.IsolatedGpu, labels: dict[str, str], allocatable: int = 3
) -> fleet.Node:
    annotations = {annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation(entries) or ""}
    return fleet.Node("gpu-node-a", "boot-1", allocatable, allocatable, annotations=annotations,
                      labels=OPERATOR_LABELS | labels, conditions={"Ready": "True"})


def labelled() -> dict[str, str]:
    wanted = gpu_isolation.plugin_labels((applied(),), operator=True)
    return {k: v for k, v in wanted.items() if v}


def pod(name: str) -> fleet.Pod:
    return fleet.Pod("gpu-operator", name, "gpu-node-a", fleet.PodPhase.RUNNING, ready=True)


OPERATOR_POD = pod("nvidia-device-plugin-daemonset-x1")
CHART_POD = pod("gpuguard-device-plugin-0-2-3-k2")
REPORT = json.dumps({"gpus": [{"uuid": CARD, "compute_mode": "PROHIBITED", "excluded": True,
                               "kernel_fault": True, "error": ""}]})


def test_the_route_says_what_gpuguard_does_on_an_operator_node() -> None:
    decision = gpu_route.route(operator_node(labels={}))
    assert decision.route is gpu_route.Route.GPU_OPERATOR
    assert OPERAND in decision.built


def test_applying_switches_the_operators_plugin_off_and_selects_the_charts() -> None:
    fresh = replace(applied(), applied_boot="", applied_at=None)
    the_node = operator_node(fresh, labels={}, allocatable=4)
    plan = policy.plan(the_node, [], [OPERATOR_POD])
    assert plan is not None
    assert plan.step is Step.APPLY
    done = policy.after_apply(the_node, plan, REPORT, NOW)
    assert done.ok
    assert done.labels == {OPERAND: "false",
                           gpu_isolation.DEVICE_PLUGIN_LABEL: "excluding",
                           gpu_isolation.DEVICE_PLUGIN_VISIBLE_LABEL: "0-2-3"}


def test_a_host_driver_node_never_gets_the_operand_label() -> None:
    fresh = replace(applied(), applied_boot="", applied_at=None)
    the_node = fleet.Node("gpu-node-a", "boot-1", 4, 4, annotations={
        annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation((fresh,)) or ""},
        conditions={"Ready": "True"})
    plan = policy.plan(the_node, [], [OPERATOR_POD])
    assert plan is not None
    assert OPERAND not in policy.after_apply(the_node, plan, REPORT, NOW).labels


def test_it_is_not_verified_while_the_operators_plugin_pod_is_on_the_node() -> None:
    the_node = operator_node(applied(), labels=labelled())
    waiting = policy.plan(the_node, [], [OPERATOR_POD, CHART_POD])
    assert waiting is not None
    assert waiting.step is Step.WAIT
    assert "GPU Operator" in waiting.detail
    gone = policy.plan(the_node, [], [CHART_POD])
    assert gone is not None
    assert gone.step is Step.RECORD
    assert gone.plugin == f"{CHART_POD.name}#0"


def test_a_lost_operand_label_or_a_re_advertised_gpu_is_applied_again() -> None:
    reset = operator_node(applied(), labels=labelled() | {OPERAND: "true"})
    plan = policy.plan(reset, [], [CHART_POD])
    assert plan is not None
    assert plan.step is Step.APPLY
    assert OPERAND in plan.detail
    counted = operator_node(applied(), labels=labelled(), allocatable=4)
    plan = policy.plan(counted, [], [CHART_POD])
    assert plan is not None
    assert plan.step is Step.APPLY


def test_the_last_return_removes_the_operand_label_so_the_operators_plugin_comes_back() -> None:
    the_node = operator_node(replace(applied(), returning=True), labels=labelled())
    plan = policy.plan(the_node, [], [CHART_POD])
    assert plan is not None
    assert plan.step is Step.BURNIN
    done = policy.after_burnin(the_node, plan, True, json.dumps({"passed": True, "checks": []}))
    assert done.reason is policy.Reason.GPU_RETURNED
    assert done.labels == {OPERAND: None, gpu_isolation.DEVICE_PLUGIN_LABEL: None,
                           gpu_isolation.DEVICE_PLUGIN_VISIBLE_LABEL: None}


def node_object(name: str, entries: tuple[gpu_isolation.IsolatedGpu, ...]) -> dict[str, object]:
    marks = {annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation(entries) or "[]"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": OPERATOR_LABELS, "annotations": marks}}


def test_the_module_config_lists_every_isolated_gpu_and_keeps_the_other_parameters(
    tmp_path: Path,
) -> None:
    other = replace(applied(), uuid="GPU-77aa")
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"items": [node_object("gpu-node-a", (applied(),)),
                                           node_object("gpu-node-b", (other,)),
                                           node_object("gpu-node-c", ())]}))
    existing = tmp_path / "cm.json"
    existing.write_text(json.dumps({"kind": "ConfigMap", "data": {
        "nvidia.conf": "NVreg_EnableGpuFirmware=0\nNVreg_ExcludedGpus=GPU-returned\n"}}))
    printed = CliRunner().invoke(app, ["gpu-isolate", "kernel-module-config", "--nodes",
                                       str(nodes), "--existing", str(existing), "-o", "json"])
    assert printed.exit_code == 0, printed.output
    config = json.loads(printed.output)
    assert config["metadata"] == {"name": "kernel-module-params", "namespace": "gpu-operator"}
    assert config["data"]["nvidia.conf"] == (
        f"NVreg_EnableGpuFirmware=0\nNVreg_ExcludedGpus={CARD},GPU-77aa\n")


def test_with_no_gpu_isolated_the_exclusion_is_dropped() -> None:
    config = gpu_route.kernel_module_config((), existing="NVreg_ExcludedGpus=GPU-1\n")
    assert config["data"] == {"nvidia.conf": ""}


def test_a_file_that_is_not_a_node_list_is_one_line_and_exit_code(tmp_path: Path) -> None:
    bad = tmp_path / "nodes.json"
    bad.write_text(json.dumps({"items": "nope"}))
    printed = CliRunner().invoke(app, ["gpu-isolate", "kernel-module-config", "--nodes", str(bad)])
    assert printed.exit_code != 0
    assert "not a Node list" in printed.output
    assert "Traceback" not in printed.output
