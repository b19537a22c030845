"""``gpuguard hygiene``: workload settings that leave GPUs busy with nothing (the phantom incident
(docs/design.md#incidents))."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpuguard.cli import guard, inputs, output
from gpuguard.controller import wiring
from gpuguard.policy import hygiene as hygiene_policy
from gpuguard.sources import workloads


def hygiene(
    namespace: Annotated[
        str | None, typer.Option(parser=inputs.namespace, help="Only this namespace.")
    ] = None,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    fmt: guard.FormatOpt = output.Format.TABLE,
) -> None:
    """Workloads that can leave orphaned CUDA contexts behind: RayJobs that keep their
    cluster after the job (no spec.shutdownAfterJobFinishes), GPU pods with a short
    terminationGracePeriodSeconds, distributed training without NCCL async error handling.

    Example: gpuguard hygiene --namespace ml -o json
    """
    settings = guard.load_settings(config)
    conn = guard.connection(kubeconfig, kube_server, None)
    with wiring.kube_client(conn) as client:
        reader = workloads.WorkloadReader(client)
        findings = hygiene_policy.review(
            reader.pods(namespace), reader.rayjobs(namespace), settings.hygiene
        )
    rows: list[dict[str, Any]] = [
        {
            "reason": str(f.reason),
            "detail": f.detail,
            "evidence": [e.describe() for e in f.evidence],
        }
        for f in findings
    ]
    if not output.emit(rows, fmt):
        output.table(
            f"workload hygiene: {len(rows)} finding(s)",
            ["reason", "detail"],
            [[r["reason"], r["detail"]] for r in rows],
        )
