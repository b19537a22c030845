"""Host trees for the conformance-check tests: real Linux paths under a temporary root.

``HostTree`` writes files and symlinks in one call each; the ``with_*`` helpers lay down one
realistic piece of a GPU worker (kernel module index, NVIDIA driver, RKE2, APT, DNS) so a test
reads as the situation it sets up. ``snapshot`` records every file with its mtime and bytes, to
prove that a run wrote nothing (or exactly one file). ``FakeRunner`` stands in for commands.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuguard.model import ports

RELEASE = "5.15.0-179-generic"
DRIVER = "580.126.09"
RKE2_DATA_DIR = "v1.31.4-rke2r1-3f1c2d4e5a6b"
SWAPS_HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"

Snapshot = dict[str, tuple[int, bytes]]


class HostTree:
    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, rel: str, text: str = "") -> HostTree:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return self

    def link(self, rel: str, target: str) -> HostTree:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
        return self

    def mkdir(self, rel: str) -> HostTree:
        (self.root / rel).mkdir(parents=True, exist_ok=True)
        return self

    def remove(self, rel: str) -> HostTree:
        (self.root / rel).unlink()
        return self

    def snapshot(self) -> Snapshot:
        files: Snapshot = {}
        for directory, _, names in os.walk(self.root):
            for name in names:
                path = Path(directory) / name
                if path.is_file() and not path.is_symlink():
                    files[str(path.relative_to(self.root))] = (
                        path.stat().st_mtime_ns,
                        path.read_bytes(),
                    )
        return files


def with_kernel(tree: HostTree, ip_vs: str | None = "ip_vs.ko", builtin: bool = False) -> None:
    """Running kernel RELEASE; ip_vs in modules.dep under the given file name, or built in."""
    base = f"lib/modules/{RELEASE}"
    tree.write("proc/sys/kernel/osrelease", f"{RELEASE}\n")
    dep = "kernel/net/netfilter/nf_conntrack.ko: kernel/net/netfilter/nf_defrag_ipv6.ko\n"
    dep += "kernel/net/netfilter/ipvs/ip_vs_rr.ko: kernel/net/netfilter/ipvs/ip_vs.ko\n"
    if ip_vs and not builtin:
        dep += f"kernel/net/netfilter/ipvs/{ip_vs}: kernel/net/netfilter/nf_conntrack.ko\n"
    tree.write(f"{base}/modules.dep", dep)
    builtin_text = "kernel/fs/ext4/ext4.ko\n"
    if builtin:
        builtin_text += "kernel/net/netfilter/ipvs/ip_vs.ko\n"
    tree.write(f"{base}/modules.builtin", builtin_text)


def with_ipvs_persisted(tree: HostTree, name: str = "ipvs.conf") -> None:
    tree.write(f"etc/modules-load.d/{name}", "# kube-proxy IPVS\nip_vs\nip_vs_rr\n")


def with_loaded_modules(tree: HostTree, modules: Iterable[str] = ("ip_vs", "nf_conntrack")) -> None:
    lines = [f"{module} 176128 6 - Live 0x0000000000000000" for module in modules]
    tree.write("proc/modules", "".join(f"{line}\n" for line in lines))


def with_nvidia(
    tree: HostTree,
    module: str | None = DRIVER,
    library: str | None = DRIVER,
    gpus: int = 8,
    library_dir: str = "usr/lib/x86_64-linux-gnu",
) -> None:
    tree.mkdir("sys/module/ext4").mkdir("sys/bus/pci/devices")
    if module:
        tree.write("sys/module/nvidia/version", f"{module}\n")
    if library:
        tree.write(f"{library_dir}/libnvidia-ml.so.{library}")
    for index in range(gpus):
        device = f"sys/bus/pci/devices/0000:{0x17 + index:02x}:00.0"
        tree.write(f"{device}/vendor", "0x10de\n").write(f"{device}/class", "0x030200\n")
    tree.write("sys/bus/pci/devices/0000:00:1f.0/vendor", "0x8086\n")
    tree.write("sys/bus/pci/devices/0000:00:1f.0/class", "0x060100\n")


def with_units(tree: HostTree, *units: str) -> None:
    wants = "etc/systemd/system/multi-user.target.wants"
    tree.mkdir(wants)
    for unit in units:
        tree.link(f"{wants}/{unit}.service", f"/usr/local/lib/systemd/system/{unit}.service")


def with_rke2_runtime(tree: HostTree, *data_dirs: str, current: str | None = None) -> None:
    """RKE2 data dirs; ``current`` makes <data-dir>/bin an absolute link, as RKE2 does."""
    for name in data_dirs or (RKE2_DATA_DIR,):
        tree.write(f"var/lib/rancher/rke2/data/{name}/bin/kubelet")
    if current:
        tree.link("var/lib/rancher/rke2/bin", f"/var/lib/rancher/rke2/data/{current}/bin")


def with_apt(
    tree: HostTree, periodic: str | None = "0", blacklist: Iterable[str] | None = None
) -> None:
    tree.mkdir("etc/apt/apt.conf.d")
    if periodic is not None:
        tree.write(
            "etc/apt/apt.conf.d/20auto-upgrades",
            'APT::Periodic::Update-Package-Lists "1";\n'
            f'APT::Periodic::Unattended-Upgrade "{periodic}";\n',
        )
    if blacklist is not None:
        entries = "".join(f'    "{entry}";\n' for entry in blacklist)
        tree.write(
            "etc/apt/apt.conf.d/50unattended-upgrades",
            "// Python regular expressions, matching packages to exclude from upgrading\n"
            "Unattended-Upgrade::Package-Blacklist {\n"
            '//  "libc6-i686$";\n'
            f"{entries}}};\n",
        )


def with_dpkg(tree: HostTree, packages: Mapping[str, str]) -> None:
    """packages: name -> dpkg Status (``install ok installed``, ``hold ok installed``...)."""
    stanzas = [
        f"Package: {name}\nStatus: {status}\nPriority: optional\nDescription: {name}\n"
        " A continuation line: with a colon.\n"
        for name, status in packages.items()
    ]
    tree.write("var/lib/dpkg/status", "\n".join(stanzas))


def with_resolvers(
    tree: HostTree, etc: Iterable[str] = ("127.0.0.53",), systemd: Iterable[str] | None = None
) -> None:
    tree.write("etc/resolv.conf", "".join(f"nameserver {ns}\n" for ns in etc) + "options edns0\n")
    if systemd is not None:
        tree.write(
            "run/systemd/resolve/resolv.conf",
            "# This is /run/systemd/resolve/resolv.conf managed by man:systemd-resolved(8).\n"
            + "".join(f"nameserver {ns}\n" for ns in systemd)
            + "search corp.example\n",
        )


def with_swaps(tree: HostTree, *areas: str) -> None:
    tree.write(
        "proc/swaps", SWAPS_HEADER + "".join(f"{a}\tfile\t\t8388604\t\t0\t\t-2\n" for a in areas)
    )


def healthy_worker(root: Path) -> HostTree:
    """A GPU worker on which every check passes (with control plane v1.31.4+rke2r1)."""
    tree = HostTree(root)
    with_kernel(tree)
    with_ipvs_persisted(tree)
    with_loaded_modules(tree)
    with_nvidia(tree)
    with_units(tree, "rke2-agent")
    with_rke2_runtime(tree, RKE2_DATA_DIR, current=RKE2_DATA_DIR)
    with_apt(tree, periodic="0")
    with_dpkg(tree, {"linux-image-5.15.0-179-generic": "hold ok installed"})
    with_resolvers(tree, etc=("127.0.0.53",), systemd=("10.20.0.2", "10.20.0.3"))
    with_swaps(tree)
    return tree


@dataclass
class FakeRunner:
    """A CommandRunner that records calls; ``on_success`` simulates the command's effect."""

    returncode: int | None = 0
    stdout: str = ""
    stderr: str = ""
    on_success: Callable[[], None] | None = None
    calls: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def run(self, argv: Sequence[str], *, timeout_s: float) -> ports.CommandResult:
        self.calls.append((tuple(argv), timeout_s))
        if self.returncode == 0 and self.on_success is not None:
            self.on_success()
        return ports.CommandResult(tuple(argv), self.returncode, self.stdout, self.stderr)
