"""gpuguard's Helm chart installed into a real control plane by the pinned Helm.

The chart lives in the repository (``deploy/helm/gpuguard``), not in the Python package: a
real control plane is for a checkout that built it (``scripts/control-plane build``).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from gpuguard.sim.control_plane import cluster

RELEASE = "gpuguard"
NAMESPACE = "gpuguard"
# The prometheus-operator kinds the chart's defaults create, as schemaless CRDs: enough for
# the API server to store them, as a cluster with prometheus-operator would.
MONITORING_KINDS = (
    ("PodMonitor", "podmonitors"),
    ("ServiceMonitor", "servicemonitors"),
    ("PrometheusRule", "prometheusrules"),
)


def chart_dir() -> Path:
    """The chart in this checkout; ControlPlaneError when gpuguard runs from a wheel."""
    chart = Path(__file__).resolve().parents[4] / "deploy" / "helm" / "gpuguard"
    if not (chart / "Chart.yaml").is_file():
        raise cluster.ControlPlaneError(
            f"gpuguard's Helm chart is not at {chart}: the real control plane needs a checkout "
            "of the repository (pip install -e .)"
        )
    return chart


def helm(plane: cluster.ControlPlane, *args: str) -> str:
    """Run the pinned helm against ``plane``, its state in the plane's folder."""
    home = plane.folder / "helm"
    env = {
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "KUBECONFIG": str(plane.kubeconfig),
    }
    done = subprocess.run(
        [str(plane.bin_dir / "helm"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )
    if done.returncode != 0:
        raise cluster.ControlPlaneError(f"helm {args[0]}: {done.stderr.strip()[-1500:]}")
    return done.stdout


def install(plane: cluster.ControlPlane, sets: Sequence[str] = ()) -> None:
    """The monitoring kinds, then `helm install` of the chart (namespace gpuguard, created)."""
    for kind, plural in MONITORING_KINDS:
        status, answer = plane.request(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _crd(kind, plural)
        )
        if status not in (201, 409):
            raise cluster.ControlPlaneError(f"CRD {plural}: {status} {answer}")
    for _, plural in MONITORING_KINDS:
        plane.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            f"crd/{plural}.monitoring.coreos.com",
        )
    helm(
        plane,
        "install",
        RELEASE,
        str(chart_dir()),
        f"--namespace={NAMESPACE}",
        "--create-namespace",
        *(f"--set={s}" for s in sets),
    )


def _crd(kind: str, plural: str) -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": kind.lower(),
                "listKind": f"{kind}List",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def pod_bound_kubeconfig(
    plane: cluster.ControlPlane, account: str, component: str, path: Path, timeout_s: float = 60.0
) -> tuple[Path, str]:
    """A kubeconfig with a token of ``account`` bound to one of the chart's ``component``
    pods once the scheduler has placed it (gpuguard's own identity: RBAC and the policies
    judge what it does, and gpuguard-identity requires the pod's claims in the token); and
    that pod's name, the identity its Lease must carry (gpuguard-leader)."""
    deadline = time.monotonic() + timeout_s
    selector = f"app.kubernetes.io/component={component}"
    while True:
        _, listed = plane.request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={selector}"
        )
        placed = [p for p in listed.get("items", []) if p["spec"].get("nodeName")]
        if placed:
            token = plane.pod_bound_token(NAMESPACE, account, placed[0])
            return plane.write_kubeconfig(path, token, account), placed[0]["metadata"]["name"]
        if time.monotonic() > deadline:
            raise cluster.ControlPlaneError(
                f"no {component} pod of gpuguard's was placed on a node in {timeout_s:.0f}s"
            )
        time.sleep(0.2)
