"""`python -m gpuguard.sim.control_plane build|path|start` (what `scripts/control-plane` runs).

- ``build``: build the pinned tools into the cache (a no-op when they are there); prints
  the seconds each group took and the bin folder.
- ``path``: print the bin folder; exit 1 when something is not built.
- ``start [FOLDER]``: start etcd, kube-apiserver, kube-controller-manager and kube-scheduler,
  print the admin kubeconfig's path and wait until interrupted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from gpuguard.errors import GpuguardError
from gpuguard.sim.control_plane import build, cluster, versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/control-plane",
        description="Build (once per machine, cached) and start a real Kubernetes control plane "
        f"({versions.KUBERNETES}), Helm {versions.HELM} and Prometheus "
        f"{versions.PROMETHEUS} from their release modules.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    made = sub.add_parser("build", help="build what is missing into the cache")
    made.add_argument("--force", action="store_true", help="rebuild every tool")
    made.add_argument("--log", type=Path, help="append the go command's output here")
    sub.add_parser("path", help="print the bin folder (exit 1 if not built)")
    started = sub.add_parser("start", help="start a control plane until interrupted")
    started.add_argument("folder", nargs="?", type=Path, help="its files (default: a temp dir)")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except GpuguardError as e:
        print(f"control-plane: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "build":
        began = time.monotonic()
        spent = build.build_all(force=args.force, log=args.log)
        print(
            f"built {spent or 'nothing (all cached)'} in {time.monotonic() - began:.0f} s "
            f"-> {versions.bin_dir()}"
        )
        return 0
    if args.command == "path":
        missing = build.missing_tools()
        print(versions.bin_dir())
        return 1 if missing else 0
    folder = args.folder or Path(tempfile.mkdtemp(prefix="gpuguard-control-plane-"))
    with cluster.start(folder) as plane:
        print(
            f"control plane up in {plane.started_s}: kubectl --kubeconfig {plane.kubeconfig}",
            flush=True,
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
