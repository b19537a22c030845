"""``gpuguard manifest job evidence|burnin|gpu-reset``: the exact Job the controller would create.

An operator reviews what gpuguard will run on a node before granting it; tests and reviewers
check the admission policy (``deploy/helm/.../validatingadmissionpolicy.yaml``) against it.
The manifest comes from the controller's own builder (``actuators.jobs``) with the image,
namespace and runtime class of the settings the controller reads, so it cannot drift.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from gpuguard.actuators import jobs
from gpuguard.cli import guard, inputs, output
from gpuguard.errors import InputError
from gpuguard.model import return_to_pool

app = typer.Typer(help="Print what gpuguard would create, for review.", no_args_is_help=True)
job_app = typer.Typer(
    help="The evidence and burn-in Jobs exactly as the controller creates them.",
    no_args_is_help=True,
)
app.add_typer(job_app, name="job")

EXAMPLE_ISOLATED_AT = "2026-01-01T00:00:00Z"
EXAMPLE_BOOT_ID = "00000000-0000-0000-0000-000000000000"


class ManifestFormat(StrEnum):
    YAML = "yaml"
    JSON = "json"


NodeOpt = Annotated[
    str, typer.Option("--node", parser=inputs.node_name, help="The node the Job is pinned to.")
]
IsolatedAtOpt = Annotated[
    str, typer.Option(help="The node's gpuguard.io/isolated-at (names the Job).")
]
FormatOpt = Annotated[ManifestFormat, typer.Option("--output", "-o", help="yaml or json.")]


def _emit(manifest: dict[str, Any], fmt: ManifestFormat) -> None:
    output.emit(manifest, output.Format(fmt.value))


@job_app.command("evidence")
def evidence(
    node: NodeOpt,
    isolated_at: IsolatedAtOpt = EXAMPLE_ISOLATED_AT,
    config: guard.ConfigOpt = None,
    fmt: FormatOpt = ManifestFormat.YAML,
) -> None:
    """The evidence Job for NODE: unprivileged, read-only /sys, /var/log and the boot ID.

    \b
    Examples:
      gpuguard manifest job evidence --node gpu-node-a
      gpuguard manifest job evidence --node gpu-node-a -o json -c settings.yaml
    """
    c = guard.load_settings(config).controller
    manifest = jobs.evidence_job(
        node, isolated_at, image=c.image, namespace=c.namespace,
        runtime_class=c.job_runtime_class, deadline=c.evidence_deadline,
    )  # fmt: skip
    _emit(manifest, fmt)


@job_app.command("gpu-reset")
def gpu_reset(
    node: NodeOpt,
    uuid: Annotated[str, typer.Option("--uuid", help="The isolated card, GPU-<uuid>.")],
    isolated_at: IsolatedAtOpt = EXAMPLE_ISOLATED_AT,
    config: guard.ConfigOpt = None,
    fmt: FormatOpt = ManifestFormat.YAML,
) -> None:
    """The GPU-reset Job for one card of NODE: nvidia-smi -r -i UUID, root with SYS_ADMIN only,
    that card alone (remediation.gpu_reset_pools; docs/security.md#the-gpu-reset-job).

    \b
    Example:
      gpuguard manifest job gpu-reset --node gpu-node-a --uuid GPU-0a8e0faa-d59d-595d
    """
    c = guard.load_settings(config).controller
    try:
        manifest = jobs.gpu_reset_job(node, isolated_at, uuid=uuid, image=c.image,
                                      namespace=c.namespace, runtime_class=c.job_runtime_class)
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="--uuid") from e
    _emit(manifest, fmt)


@job_app.command("burnin")
def burnin(
    node: NodeOpt,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs the node should have.")],
    mode: Annotated[
        return_to_pool.BurninMode,
        typer.Option(help="matmul, or matmul+memtest after memory faults."),
    ] = return_to_pool.BurninMode.MATMUL_AND_MEMTEST,
    reason: Annotated[
        str | None, typer.Option(help="The node's gpuguard.io/reason, e.g. xid-48.")
    ] = None,
    isolated_at: IsolatedAtOpt = EXAMPLE_ISOLATED_AT,
    boot_id: Annotated[str, typer.Option(help="The boot the burn-in tests.")] = EXAMPLE_BOOT_ID,
    config: guard.ConfigOpt = None,
    fmt: FormatOpt = ManifestFormat.YAML,
) -> None:
    """The burn-in Job for NODE: GPUs from the device plugin, no host path, non-root.

    \b
    Examples:
      gpuguard manifest job burnin --node gpu-node-a --gpus 8
      gpuguard manifest job burnin --node gpu-node-a --gpus 8 --mode matmul --reason xid-79
    """
    loaded = guard.load_settings(config)
    c = loaded.controller
    manifest = jobs.burnin_job(
        node,
        isolated_at,
        boot_id,
        gpus=gpus,
        mode=str(mode),
        image=c.image,
        reason=reason,
        namespace=c.namespace,
        runtime_class=c.job_runtime_class,
        deadline=loaded.return_to_pool.burnin_deadline,
    )
    _emit(manifest, fmt)
