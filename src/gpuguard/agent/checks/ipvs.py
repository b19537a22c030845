"""``ipvs-resolvable``, ``ipvs-persist``, ``ipvs-loaded``: can kube-proxy (IPVS mode) start?

The lifecycle report (docs/design.md#incidents), nine incidents: on the cluster's 5.15 kernels
nothing auto-loads ip_vs (the netlink alias arrived in 5.16) and RKE2's kube-proxy cannot modprobe
it from its container, so after any reboot ip_vs is loaded only if ``/etc/modules-load.d/*.conf``
lists it. These three checks look at the module index, the persistence file and the running kernel;
``--fix`` may create the missing persistence file and load the modules — the only repair gpuguard
ever makes in place.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpuguard.agent.checks import hostfs, result
from gpuguard.model import ports

RESOLVABLE = "ipvs-resolvable"
PERSIST = "ipvs-persist"
LOADED = "ipvs-loaded"

IPVS_MODULES = ("ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack")
PERSIST_FILE = "etc/modules-load.d/ipvs.conf"
PERSIST_TEXT = (
    "# Written by `gpuguard check --fix`: kube-proxy in IPVS mode needs these after every boot.\n"
    + "".join(f"{module}\n" for module in IPVS_MODULES)
)
# systemd-modules-load's persistent directories, in precedence order (/run is not persistent).
MODULES_LOAD_DIRS = (
    "etc/modules-load.d",
    "usr/local/lib/modules-load.d",
    "usr/lib/modules-load.d",
    "lib/modules-load.d",
)
_IP_VS_OBJECT = re.compile(r"(?:^|/)ip_vs\.ko(?:\.(?:zst|xz|gz))?$")


def kernel_release(root: Path) -> str:
    release = hostfs.read_text(root, "proc/sys/kernel/osrelease").strip()
    if not release:
        raise hostfs.HostReadError("/proc/sys/kernel/osrelease: empty")
    return release


def _index_lists_ip_vs(index_text: str) -> bool:
    """modules.dep lines are ``path: deps``; modules.builtin lines are bare paths."""
    return any(
        _IP_VS_OBJECT.search(line.split(":", 1)[0].strip()) for line in index_text.splitlines()
    )


def find_in_module_index(root: Path) -> tuple[str, str | None]:
    """(host path of the index read, "module" | "builtin" | None) for the running kernel."""
    release = kernel_release(root)
    dep, builtin = f"lib/modules/{release}/modules.dep", f"lib/modules/{release}/modules.builtin"
    if not hostfs.exists(root, dep) and not hostfs.exists(root, builtin):
        raise hostfs.HostReadError(
            f"{hostfs.shown(dep)}: not found (nor modules.builtin) for running kernel {release}"
        )
    if hostfs.exists(root, builtin) and _index_lists_ip_vs(hostfs.read_text(root, builtin)):
        return hostfs.shown(builtin), "builtin"
    if hostfs.exists(root, dep) and _index_lists_ip_vs(hostfs.read_text(root, dep)):
        return hostfs.shown(dep), "module"
    return hostfs.shown(f"lib/modules/{release}/"), None


def check_resolvable(root: Path = Path("/")) -> result.CheckResult:
    index, kind = find_in_module_index(root)
    if kind == "builtin":
        return result.passed(RESOLVABLE, f"ip_vs is built into the kernel ({index})")
    if kind == "module":
        return result.passed(RESOLVABLE, f"ip_vs is in the module index {index}")
    release = kernel_release(root)
    return result.failed(
        RESOLVABLE,
        f"ip_vs is in neither modules.dep nor modules.builtin under {index}",
        f"install the kernel modules package for {release} "
        f"(e.g. apt install linux-modules-extra-{release}), then: depmod -a {release}",
    )


def _lists_ip_vs(conf_text: str) -> bool:
    for line in conf_text.splitlines():
        entry = line.strip()
        if entry and not entry.startswith(("#", ";")) and entry.replace("-", "_") == "ip_vs":
            return True
    return False


def _effective_conf_files(root: Path) -> dict[str, str]:
    """name → host path of each modules-load.d file systemd would read (first dir wins)."""
    chosen: dict[str, str] = {}
    for directory in MODULES_LOAD_DIRS:
        if not hostfs.exists(root, directory):
            continue
        for name in hostfs.list_dir(root, directory):
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = f"{directory}/{name}"
    return chosen


def _persisting_file(root: Path) -> str | None:
    for rel in _effective_conf_files(root).values():
        if hostfs.link_target(root, rel) == "/dev/null":
            continue  # masked
        if _lists_ip_vs(hostfs.read_text(root, rel)):
            return rel
    return None


def _create_persist_file(root: Path) -> None:
    """Create PERSIST_FILE; never overwrite (O_EXCL), never touch any other file."""
    directory = hostfs.resolve(root, "etc/modules-load.d")
    directory.mkdir(mode=0o755, exist_ok=True)
    fd = os.open(directory / "ipvs.conf", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as stream:
        stream.write(PERSIST_TEXT)


def check_persist(root: Path = Path("/"), fix: bool = False) -> result.CheckResult:
    index, kind = find_in_module_index(root)
    if kind == "builtin":
        return result.passed(PERSIST, f"ip_vs is built into the kernel ({index}); nothing to load")
    persisting = _persisting_file(root)
    if persisting is not None:
        return result.passed(PERSIST, f"ip_vs is listed in {hostfs.shown(persisting)}")
    missing = "no modules-load.d file lists ip_vs: it will not be loaded after the next reboot"
    manual = f"printf '%s\\n' {' '.join(IPVS_MODULES)} > {hostfs.shown(PERSIST_FILE)}"
    if hostfs.exists(root, PERSIST_FILE):
        return result.failed(
            PERSIST,
            f"{missing}; {hostfs.shown(PERSIST_FILE)} exists without ip_vs (left untouched)",
            f"add the line ip_vs to {hostfs.shown(PERSIST_FILE)}",
        )
    if not fix:
        return result.failed(PERSIST, missing, manual)
    try:
        _create_persist_file(root)
    except OSError as e:
        return result.failed(PERSIST, f"{missing}; --fix could not create it: {e.strerror}", manual)
    return result.fixed(
        PERSIST, missing, f"created {hostfs.shown(PERSIST_FILE)} ({' '.join(IPVS_MODULES)})"
    )


def _loaded(root: Path) -> str | None:
    """Where ip_vs was seen loaded (host path), or None."""
    modules = hostfs.read_text(root, "proc/modules")
    if any(line.split(" ", 1)[0] == "ip_vs" for line in modules.splitlines()):
        return "/proc/modules"
    if hostfs.exists(root, "sys/module/ip_vs"):
        return "/sys/module/ip_vs"
    return None


def modprobe_argv(root: Path) -> list[str]:
    """``modprobe -a`` the IPVS modules; ``-d root`` makes it use the host's /lib/modules."""
    where = [] if root == Path("/") else ["-d", str(root)]
    return ["modprobe", *where, "-a", *IPVS_MODULES]


def _load_modules(root: Path, runner: ports.CommandRunner, timeout_s: float) -> result.CheckResult:
    argv = modprobe_argv(root)
    outcome = runner.run(argv, timeout_s=timeout_s)
    command = " ".join(outcome.argv)
    if outcome.timed_out:
        return result.unknown(LOADED, f"ip_vs not loaded; `{command}` timed out after {timeout_s}s")
    if outcome.returncode != 0:
        return result.failed(
            LOADED,
            f"ip_vs not loaded; `{command}` exited {outcome.returncode}: "
            f"{outcome.stderr.strip() or outcome.stdout.strip()}",
            "check ipvs-resolvable, then: " + " ".join(modprobe_argv(Path("/"))),
        )
    seen = _loaded(root)
    if seen is None:
        return result.failed(LOADED, f"`{command}` succeeded but ip_vs is not in /proc/modules")
    return result.fixed(LOADED, f"ip_vs was not loaded; now in {seen}", f"ran `{command}`")


def check_loaded(
    root: Path = Path("/"),
    runner: ports.CommandRunner | None = None,
    fix: bool = False,
    timeout_s: float = 5.0,
) -> result.CheckResult:
    seen = _loaded(root)
    if seen is not None:
        return result.passed(LOADED, f"ip_vs is loaded ({seen})")
    if fix and runner is not None:
        return _load_modules(root, runner, timeout_s)
    return result.failed(
        LOADED,
        "ip_vs is not loaded (not in /proc/modules, no /sys/module/ip_vs): "
        "kube-proxy in IPVS mode cannot start",
        " ".join(modprobe_argv(Path("/"))),
    )
