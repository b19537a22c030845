"""Build the pinned real tools from the Go module proxy, once per machine.

Each group is built in a small Go module of its own under the cache (never in the repository),
so one tool's dependency versions never constrain another's:

- Kubernetes: a module that requires `k8s.io/kubernetes` and replaces every staging module
  (`k8s.io/api`, `k8s.io/client-go`, ...) with the same release's published version, as
  k8s.io/kubernetes' own go.mod replaces them with ./staging paths the proxy does not serve.
- etcd: `go.etcd.io/etcd/server/v3` has replace directives of its own, so `go install @v` is
  refused; a three-line main calls `etcdmain.Main`, as etcd's server/main.go does.
- Helm and Prometheus: their command packages, required at the pinned version.

A tool already in bin/ is not built again; `--force` rebuilds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gpuguard.errors import GpuguardError
from gpuguard.sim.control_plane import versions
from gpuguard.sim.control_plane.versions import Tool

ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


class BuildError(GpuguardError):
    """The Go toolchain is missing or a build step failed."""


def missing_tools(
    bin_dir: Path | None = None, tools: Sequence[Tool] = versions.ALL_TOOLS
) -> list[str]:
    """The pinned ``tools`` not yet built into the cache."""
    where = bin_dir or versions.bin_dir()
    return [tool.name for tool in tools if not (where / tool.name).is_file()]


def build_all(*, force: bool = False, log: Path | None = None) -> dict[str, float]:
    """Build every missing tool (every tool with force); return seconds spent per group."""
    go = shutil.which("go")
    if go is None:
        raise BuildError("the real control plane is built with Go: no `go` on PATH")
    root = versions.cache_root() / versions.build_key()
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    groups: list[tuple[str, Sequence[Tool], str]] = [
        ("kubernetes", versions.KUBERNETES_TOOLS, ""),
        ("etcd", (versions.ETCD_TOOL,), ETCD_MAIN),
        ("helm", (versions.HELM_TOOL,), ""),
        ("prometheus", (versions.PROMETHEUS_TOOL,), ""),
    ]
    spent: dict[str, float] = {}
    for name, tools, main_go in groups:
        wanted = [t for t in tools if force or not (bin_dir / t.name).is_file()]
        if not wanted:
            continue
        started = time.monotonic()
        _build_group(go, root / "src" / name, bin_dir, wanted, main_go, log)
        spent[name] = round(time.monotonic() - started, 1)
    (root / "versions.json").write_text(
        json.dumps({t.name: t.version for t in versions.ALL_TOOLS}, indent=2) + "\n"
    )
    return spent


def _build_group(
    go: str, module_dir: Path, bin_dir: Path, tools: Sequence[Tool], main_go: str, log: Path | None
) -> None:
    module_dir.mkdir(parents=True, exist_ok=True)
    (module_dir / "go.mod").write_text(_go_mod(module_dir.name, tools))
    if main_go:
        (module_dir / "main.go").write_text(main_go)
    env = _go_env()
    for tool in tools:
        _run([go, "get", f"{tool.package}@{tool.version}"], module_dir, env, log)
    if main_go:
        _run([go, "mod", "tidy"], module_dir, env, log)
        (tool,) = tools
        target = [str(bin_dir / tool.name), "."]
    else:
        target = [str(bin_dir) + os.sep, *(t.package for t in tools)]
    _run([go, "build", *_build_flags(tools), "-o", *target], module_dir, env, log)


def _build_flags(tools: Sequence[Tool]) -> list[str]:
    stamps = dict(stamp for tool in tools for stamp in tool.stamps)
    ldflags = " ".join(["-s", "-w", *(f"-X {name}={value}" for name, value in stamps.items())])
    return ["-trimpath", f"-ldflags={ldflags}"]


def _go_mod(name: str, tools: Sequence[Tool]) -> str:
    lines = [f"module gpuguard.local/build/{name}", "", "go 1.26.0", ""]
    if any(t.module == "k8s.io/kubernetes" for t in tools):
        lines.append("replace (")
        for staging in _kubernetes_staging_modules():
            lines.append(f"\t{staging} => {staging} {versions.KUBERNETES_STAGING}")
        lines.append(")")
    return "\n".join(lines) + "\n"


def _kubernetes_staging_modules() -> list[str]:
    """The staging modules k8s.io/kubernetes' go.mod replaces with ./staging paths."""
    go = shutil.which("go") or "go"
    raw = _output([go, "mod", "download", "-json", f"k8s.io/kubernetes@{versions.KUBERNETES}"])
    go_mod = Path(json.loads(raw)["GoMod"]).read_text()
    staging = []
    for line in go_mod.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "=>" and parts[2].startswith("./staging/"):
            staging.append(parts[0])
    if not staging:
        raise BuildError(
            f"k8s.io/kubernetes@{versions.KUBERNETES}: its go.mod names no staging module"
        )
    return staging


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-mod=mod")
    env.setdefault("CGO_ENABLED", "0")
    env["GOTOOLCHAIN"] = env.get("GOTOOLCHAIN", "local")
    return env


def _output(cmd: list[str]) -> str:
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, check=True, env=_go_env(), cwd="/"
        )
    except subprocess.CalledProcessError as e:
        raise BuildError(f"{' '.join(cmd)} failed: {e.stderr.strip()[-2000:]}") from e
    return done.stdout


def _run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path | None) -> None:
    print(f"== {' '.join(cmd)}  (in {cwd})", file=sys.stderr, flush=True)
    sink = log.open("a") if log else None
    try:
        done = subprocess.run(
            cmd,
            cwd=cwd,
            env=env,
            stdout=sink or subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
    finally:
        if sink:
            sink.close()
    if done.returncode != 0:
        tail = (done.stdout or "")[-3000:] if not log else f"see {log}"
        raise BuildError(f"{' '.join(cmd)} failed in {cwd} (exit {done.returncode}): {tail}")
