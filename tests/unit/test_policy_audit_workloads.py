"""Workload rules of the audit: cordon-tolerating and pinned GPU pods, the hygiene checks as
rules, priority, PDBs that block every drain, multi-pod jobs without a gang."""

from __future__ import annotations

from gpuguard.model.audit import Input, Severity
from tests.audit_builders import node, pod, run_rule, view

N, P, J = Input.NODES, Input.PODS, Input.JOBS


def test_gpu_pod_tolerating_every_taint_lands_on_cordoned_nodes() -> None:
    everything = pod("eval", owner="Job", extra_spec={"tolerations": [{"operator": "Exists"}]})
    cordon = pod("serve", owner="ReplicaSet", extra_spec={"tolerations": [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]})
    narrow = pod("ok", extra_spec={"tolerations": [{"key": "nvidia.com/gpu",
                                                    "operator": "Exists"}]})
    plugin = pod("dp", owner="DaemonSet", extra_spec={"tolerations": [{"operator": "Exists"}]})
    result = run_rule("TOL-1", view({P: [everything, cordon, narrow, plugin]}))
    assert {f.objects[0]: f.severity for f in result.findings} == {
        "Pod/ml/eval": Severity.HIGH, "Pod/ml/serve": Severity.MEDIUM}


def test_job_template_pinned_to_a_cordoned_node_is_high() -> None:
    def job(name: str, pinned: str | None) -> dict[str, object]:
        template = pod(name, node_name=pinned)
        return {"metadata": {"name": name, "namespace": "ml"},
                "spec": {"template": {"spec": template["spec"]}}}

    nodes = [node("gpu-1", cordoned=True), node("gpu-2")]
    jobs = [job("eval", "gpu-1"), job("bench", "gpu-2"), job("free", None)]
    result = run_rule("PIN-1", view({N: nodes, J: jobs, Input.DEPLOYMENTS: []}))
    assert {f.objects[0]: f.severity for f in result.findings} == {
        "Job/ml/eval": Severity.HIGH, "Job/ml/bench": Severity.MEDIUM}


def test_hygiene_checks_become_rules() -> None:
    distributed = pod("w0", env={"WORLD_SIZE": "16", "MASTER_ADDR": "w0"},
                      extra_spec={"terminationGracePeriodSeconds": 5})
    v = view({P: [distributed], Input.RAYJOBS: [{"metadata": {"name": "rj", "namespace": "ml"},
                                                 "spec": {}}]})
    assert [f.objects for f in run_rule("TGP-1", v).findings] == [("Namespace/ml",)]
    assert [f.objects for f in run_rule("NCCL-1", v).findings] == [("Pod/ml/w0",)]
    assert [f.objects for f in run_rule("RAY-1", v).findings] == [("RayJob/ml/rj",)]


def test_short_grace_periods_one_finding_per_namespace_listing_its_pods() -> None:
    def in_ns(name: str, namespace: str, grace: int | None) -> dict[str, object]:
        spec = {} if grace is None else {"terminationGracePeriodSeconds": grace}
        return pod(name, namespace=namespace, extra_spec=spec)

    pods = [in_ns("w0", "ml", 5), in_ns("w1", "ml", None), in_ns("ok", "ml", 600),
            in_ns("w0", "vision", 10)]
    findings = run_rule("TGP-1", view({P: pods})).findings
    assert [(f.objects, f.severity) for f in findings] == [
        (("Namespace/ml",), Severity.LOW), (("Namespace/vision",), Severity.LOW)]
    assert [f.evidence.split(";")[0] for f in findings] == [
        "2 GPU pod(s) with a grace period under 60s: w0 (5s), w1 (30s (default))",
        "1 GPU pod(s) with a grace period under 60s: w0 (10s)"]


def test_gpu_pods_without_priority_one_finding_per_namespace() -> None:
    pods = [pod("a"), pod("b"), pod("c", extra_spec={"priorityClassName": "training"})]
    [finding] = run_rule("PRIO-1", view({P: pods})).findings
    assert finding.objects == ("Namespace/ml",)
    assert finding.evidence.startswith("2 GPU pod(s)")


def test_pdb_with_no_disruption_allowed_over_gpu_pods() -> None:
    def pdb(name: str, allowed: int, selector: dict[str, object]) -> dict[str, object]:
        return {"metadata": {"name": name, "namespace": "ml"}, "spec": {"selector": selector},
                "status": {"disruptionsAllowed": allowed}}

    pods = [pod("serve-0", labels={"app": "serve"})]
    pdbs = [pdb("strict", 0, {"matchLabels": {"app": "serve"}}),
            pdb("loose", 1, {"matchLabels": {"app": "serve"}}),
            pdb("other", 0, {"matchExpressions": [{"key": "app", "operator": "In",
                                                   "values": ["web"]}]})]
    result = run_rule("PDB-1", view({P: pods, Input.PDBS: pdbs}))
    assert [f.objects for f in result.findings] == [("PodDisruptionBudget/ml/strict",)]


def test_multi_pod_job_on_the_default_scheduler_without_a_gang_marker() -> None:
    plain = [pod(f"llm-{i}", labels={"job-name": "llm"}, node_name=None) for i in range(2)]
    volcano = [pod(f"v-{i}", labels={"job-name": "v", "volcano.sh/job-name": "v"})
               for i in range(2)]
    gang_scheduler = [pod(f"g-{i}", labels={"job-name": "g"},
                          extra_spec={"schedulerName": "volcano"}) for i in range(2)]
    single = [pod("one", labels={"job-name": "one"})]
    result = run_rule("GANG-0", view({P: [*plain, *volcano, *gang_scheduler, *single], J: []}))
    assert [f.objects for f in result.findings] == [("Job/ml/llm",)]

