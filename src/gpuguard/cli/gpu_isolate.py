"""``gpuguard gpu-isolate apply|undo``: what the pinned GPU-isolation Job runs on a node
(docs/gpu-isolation.md).

``taint-rule`` prints the DRA route's DeviceTaintRule for one GPU (for kubectl apply).
``kernel-module-config`` prints the GPU Operator's kernel-module ConfigMap that excludes every
isolated GPU at the driver's next load (for a person to apply; gpuguard never applies it).

Applies (or removes) compute mode PROHIBITED and the host's exclusion list for the given
GPU UUIDs, reads both back, and prints the report (one JSON line); ``--summary-file`` writes
it where Kubernetes reads the Job's result (``/dev/termination-log``). Exit 0 when every GPU
ended in the wanted state, 1 otherwise, 2 on a bad flag or a bad ``--xid-overrides`` file
(before touching any GPU: the controller then treats the Job as failed).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuguard.agent import commands
from gpuguard.agent import gpu_isolation as host
from gpuguard.catalog import xid as xid_catalog
from gpuguard.cli import inputs, output
from gpuguard.errors import GpuguardError, InputError
from gpuguard.model import input_files
from gpuguard.policy import gpu_route
from gpuguard.sources import kubernetes

HELP = """Take GPUs out on this host (apply) or put them back (undo).

\b
  apply   nvidia-smi -i UUID -c PROHIBITED, and UUID added to
          /etc/gpuguard/excluded-gpus (the host's record of isolated GPUs)
  undo    nvidia-smi -i UUID -c DEFAULT, and UUID removed from that list

Run by gpuguard's GPU-isolation Job with the host's /etc/gpuguard mounted at
/host/etc/gpuguard (--root /host). Never run by hand on a node gpuguard manages: undo a GPU
isolation with the gpuguard.io/gpu-return annotation (docs/gpu-isolation.md).

\b
Examples:
  gpuguard gpu-isolate apply --root /host --uuid GPU-0a8e... --summary-file /dev/termination-log
  gpuguard gpu-isolate apply --root /host --uuid GPU-0a8e... \\
      --xid-overrides /etc/gpuguard-xid/xid-overrides.yaml --summary-file /dev/termination-log
"""

UuidOption = Annotated[list[str], typer.Option("--uuid", help="A GPU UUID (repeatable).")]
RootOption = Annotated[
    Path, typer.Option(exists=True, file_okay=False, help="The host's root (/host in the Job).")
]
SummaryFileOption = Annotated[
    Path | None, typer.Option(help="Also write the report here (/dev/termination-log).")
]
XidOverridesOption = Annotated[Path | None, typer.Option(
    help="The cluster's Xid class override file, the controller's controller.xid_overrides "
    "(see `xid explain --help`): a card's fault is confirmed by a Xid of the class the "
    "controller acts on. A bad file stops the command naming it, before any GPU is touched.",
)]  # fmt: skip

app = typer.Typer(help=HELP, no_args_is_help=True)


Step = Callable[[host.GpuControl, Sequence[str], Path, xid_catalog.XidCatalog], host.Report]


def _run(
    step: Step,
    uuids: list[str],
    root: Path,
    summary_file: Path | None,
    xid_overrides: Path | None,
) -> None:
    bad = [u for u in uuids if not u.startswith("GPU-")]
    if bad or not uuids:
        raise typer.BadParameter(f"expected GPU-<uuid>, got {bad or 'none'}", param_hint="--uuid")
    classes = xid_catalog.load_catalog(xid_overrides)
    report = step(host.NvidiaSmi(commands.SubprocessRunner(), root), uuids, root, classes)
    text = report.to_json()
    if summary_file is not None:
        output.write_summary(summary_file, text)
    typer.echo(text)
    raise typer.Exit(0 if report.ok else 1)


@app.command("apply", help="Compute mode PROHIBITED and the exclusion list, read back.")
def apply(
    uuid: UuidOption,
    root: RootOption = Path("/"),
    summary_file: SummaryFileOption = None,
    xid_overrides: XidOverridesOption = None,
) -> None:
    _run(host.apply, uuid, root, summary_file, xid_overrides)


@app.command("undo", help="Compute mode DEFAULT and the GPUs off the exclusion list.")
def undo(
    uuid: UuidOption,
    root: RootOption = Path("/"),
    summary_file: SummaryFileOption = None,
    xid_overrides: XidOverridesOption = None,
) -> None:
    _run(host.undo, uuid, root, summary_file, xid_overrides)


SlicesOption = Annotated[
    Path,
    typer.Option(exists=True, dir_okay=False,
                 help="`kubectl get resourceslices -o json` saved to a file."),
]


@app.command("taint-rule", help="Print the DRA DeviceTaintRule that keeps one GPU out.")
def taint_rule(
    node: Annotated[str, typer.Option(parser=inputs.node_name, help="The node the GPU is on.")],
    uuid: Annotated[str, typer.Option(help="The isolated GPU's UUID (GPU-...).")],
    slices: SlicesOption,
    effect: Annotated[
        gpu_route.Effect, typer.Option(help="NoSchedule, or NoExecute to evict its pods too.")
    ] = gpu_route.Effect.NO_SCHEDULE,
    api_version: Annotated[
        str, typer.Option(help="resource.k8s.io/v1 (Kubernetes 1.37) or v1beta2 (1.36).")
    ] = gpu_route.API_VERSIONS[0],
    fmt: output.FormatOpt = output.Format.YAML,
) -> None:
    """The device is resolved from the slices by its ``uuid`` attribute, so run it again
    after the DRA driver republishes (docs/gpu-isolation.md#dra). Apply it with kubectl;
    delete it to undo."""
    if api_version not in gpu_route.API_VERSIONS:
        raise typer.BadParameter(f"one of {', '.join(gpu_route.API_VERSIONS)}",
                                 param_hint="--api-version")
    items = _items(slices, "--slices", "ResourceSlice")
    device = gpu_route.resolve(gpu_route.slice_devices(items), node, uuid)
    if device is None:
        raise InputError(
            f"no {gpu_route.DRA_DRIVER} device with uuid {uuid} on {node} in {slices}"
        )
    manifest = gpu_route.taint_rule(device, effect=effect, api_version=api_version)
    if not output.emit(manifest, fmt):
        output.emit(manifest, output.Format.YAML)


NodesOption = Annotated[
    Path,
    typer.Option(exists=True, dir_okay=False, help="`kubectl get nodes -o json` saved to a file."),
]


@app.command(
    "kernel-module-config",
    help="Print the GPU Operator's kernel-module ConfigMap with NVreg_ExcludedGpus listing "
    "every isolated GPU (for kubectl apply; from the driver container's next restart).",
)
def kernel_module_config(
    nodes: NodesOption,
    existing: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False,
                     help="The ConfigMap now (`kubectl get configmap NAME -o json`): its other "
                     "nvidia.conf lines are kept."),
    ] = None,
    name: Annotated[str, typer.Option(help="Its name (driver.kernelModuleConfig.name).")]
    = gpu_route.MODULE_CONFIG_NAME,
    namespace: Annotated[
        str, typer.Option(parser=inputs.namespace, help="The GPU Operator's namespace.")
    ]
    = gpu_route.MODULE_CONFIG_NAMESPACE,
    fmt: output.FormatOpt = output.Format.YAML,
) -> None:
    """The durable option of the GPU Operator route (docs/gpu-isolation.md#gpu-operator):
    offered, never applied by gpuguard; run it again after every isolation and return."""
    items = _items(nodes, "--nodes", "Node")
    try:
        fleet_nodes = [kubernetes.node_from_object(item) for item in items]
    except GpuguardError as e:
        raise InputError(f"--nodes {nodes}: not a Node list: {e}") from e
    current = ""
    if existing is not None:
        configs = _items(existing, "--existing", "ConfigMap")
        data = configs[0].get("data") if configs else None
        current = str(data.get("nvidia.conf", "")) if isinstance(data, dict) else ""
    manifest = gpu_route.kernel_module_config(
        gpu_route.isolated_uuids(fleet_nodes), existing=current, name=name, namespace=namespace)
    if not output.emit(manifest, fmt):
        output.emit(manifest, output.Format.YAML)


def _items(path: Path, flag: str, kind: str) -> list[dict[str, Any]]:
    """The objects of a ``kubectl get -o json`` file: a list's items, or the one object."""
    text = input_files.read_text(path, what=flag)
    try:
        data = json.loads(text)
    except ValueError as e:
        raise InputError(f"{flag} {path}: not JSON: {e}") from e
    if isinstance(data, dict) and data.get("kind") == kind:
        return [data]
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InputError(f"{flag} {path}: not a {kind} list")
    return items
