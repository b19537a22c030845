"""Host trees: a simulated node's filesystem, in real Linux layout, for the agent's checks.

The node agent's checks take a ``root: Path`` (``/`` on a real host). The simulator writes
one tree per node under ``<root>/<node-name>/`` so the same checks run against it. Layout
(every path is the real one; rewriting a tree reflects the node's current state, so calling
``write_host_tree`` again is idempotent):

- ``sys/module/nvidia/version`` — loaded kernel module version, e.g. ``580.126.09``
- ``usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<version>`` (the installed NVML library; the
  only such file) and ``libnvidia-ml.so.1`` -> it (relative symlink)
- ``proc/sys/kernel/osrelease`` — the running kernel release
- ``proc/modules`` — ``nvidia*`` always, ``ip_vs*`` lines only while ip_vs is loaded
- ``lib/modules/<release>/modules.dep`` and ``modules.builtin`` for the running kernel and a
  pending (installed, not yet booted) one; ``modules.dep`` lists
  ``kernel/net/netfilter/ipvs/ip_vs.ko:`` unless the node's ip_vs module is missing
- ``etc/modules-load.d/ipvs.conf`` — only while ip_vs loading at boot is persisted
- ``etc/resolv.conf`` — ``nameserver 127.0.0.53`` (systemd-resolved stub) with the real
  upstreams in ``run/systemd/resolve/resolv.conf``; or, without the stub, the upstreams
  directly (and no ``run/systemd/resolve/resolv.conf``)
- ``etc/systemd/system/multi-user.target.wants/<unit>.service`` — one relative symlink per
  enabled RKE2 unit, to ``usr/local/lib/systemd/system/<unit>.service`` in the same tree
  (use ``os.path.lexists``/``readlink``: on a real host the link target is absolute)
- ``etc/apt/apt.conf.d/20auto-upgrades`` (``APT::Periodic::Unattended-Upgrade "1"|"0"``) and
  ``50unattended-upgrades`` (``Package-Blacklist`` with ``nvidia-``/``libnvidia-`` when set)
- ``var/lib/dpkg/status`` — kernel and NVIDIA packages, ``hold ok installed`` when held
- ``proc/swaps`` — the header only, plus ``/swap.img`` when swap is on
- ``sys/bus/pci/devices/<dddd:bb:dd.f>/`` per GPU: ``config`` (256 bytes, little-endian
  vendor 0x10de and device id; all 0xff once the GPU fell off the bus), ``vendor``,
  ``device``, ``class``, ``current_link_width``/``max_link_width``, ``current_link_speed``/
  ``max_link_speed`` (``32.0 GT/s PCIe``; ``Unknown`` and width 63 when off the bus, which is
  what the kernel derives from an all-ones link status register)
- ``var/log/kern.log`` — the node's kernel lines (syslog stamped, see ``sim.kernel_lines``)
- the PCI topology: each GPU's files live in its real directory
  ``sys/devices/pci<dddd>:<bb-1>/<dddd>:<bb-1>:01.0/<gpu pci>/`` (a host bridge, then a root
  port on the bus numbered one lower than the GPU's), and ``sys/bus/pci/devices/<pci>`` is a
  RELATIVE symlink to it, as on a real host (``../../../devices/...``). The root port has its own
  ``vendor``/``class`` (an Intel PCI bridge, 0x060400) and link, and its AER counters:
  ``aer_dev_correctable``/``aer_dev_nonfatal``/``aer_dev_fatal`` (``NAME COUNT`` lines and a
  ``TOTAL_ERR_*`` line) and ``aer_rootport_total_err_cor``/``_nonfatal``/``_fatal``. All zero
  while the GPU is on the bus; once it fell off, the port records a Surprise Down (``SDES 1``,
  ``TOTAL_ERR_FATAL 1``, ``aer_rootport_total_err_fatal`` 1). A power cycle clears them.
- ``proc/sys/kernel/random/boot_id`` (the node's boot ID) and ``etc/hostname`` (its name)
- ``proc/driver/nvidia/gpus/<pci>/information`` per GPU — ``Model``, ``GPU UUID``, ``Bus
  Location`` and ``Device Minor`` (the ``/dev/nvidiaN`` number, here the GPU's index), the
  fields the driver fills at load (the NVIDIA driver's ``procfs`` interface, nv-procfs.c in
  NVIDIA's open-gpu-kernel-modules); the agent reads its ``gpu`` label from it
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gpuguard.sim import state

NVIDIA_VENDOR_ID = 0x10DE
DEFAULT_DEVICE_ID = 0x2B85
DEVICE_IDS = {
    "NVIDIA GeForce RTX 5090": 0x2B85,
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": 0x2BB5,
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": 0x2BB1,
    "NVIDIA H100 80GB HBM3": 0x2330,
    "NVIDIA A100-SXM4-80GB": 0x20B2,
}
NVML_DIR = Path("usr/lib/x86_64-linux-gnu")
IPVS_MODULES = ("ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack")
_PROC_MODULES_NVIDIA = (
    "nvidia_uvm 1966080 0 - Live 0x0000000000000000 (POE)",
    "nvidia_drm 135168 0 - Live 0x0000000000000000 (POE)",
    "nvidia_modeset 1638400 1 nvidia_drm, Live 0x0000000000000000 (POE)",
    "nvidia 14389248 6 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)",
)
_PROC_MODULES_IPVS = (
    "ip_vs_sh 16384 0 - Live 0x0000000000000000",
    "ip_vs_wrr 16384 0 - Live 0x0000000000000000",
    "ip_vs_rr 16384 6 - Live 0x0000000000000000",
    "ip_vs 200704 12 ip_vs_sh,ip_vs_wrr,ip_vs_rr, Live 0x0000000000000000",
)


def device_id(model: str) -> int:
    return DEVICE_IDS.get(model, DEFAULT_DEVICE_ID)


def write_host_tree(node: state.SimNode, root: Path, kernel_release: str | None = None) -> Path:
    """Write (or rewrite) ``root/<node>/`` from the node's state; returns that directory.

    ``kernel_release`` overrides the running release the tree shows (default: the node's).
    """
    tree = root / node.name
    release = kernel_release or node.kernel_release
    _write_driver(tree, node)
    _write_kernel(tree, node, release)
    _write_network(tree, node)
    _write_services(tree, node)
    _write_packages(tree, node, release)
    for gpu in node.gpus:
        _write_pci(tree, gpu)
    _write_identity(tree, node)
    _write(tree / "var/log/kern.log", "".join(line + "\n" for line in node.kernel_log))
    return tree


def config_space(gpu: state.SimGpu) -> bytes:
    """256 bytes of PCI config space: all ones off the bus, else an NVIDIA VGA header."""
    if not gpu.on_bus:
        return b"\xff" * 256
    header = bytearray(256)
    header[0:2] = NVIDIA_VENDOR_ID.to_bytes(2, "little")
    header[2:4] = device_id(gpu.model).to_bytes(2, "little")
    header[4:6] = (0x0407).to_bytes(2, "little")  # command: I/O, memory, bus master
    header[6:8] = (0x0010).to_bytes(2, "little")  # status: capabilities list
    header[0x08] = 0xA1  # revision
    header[0x09:0x0C] = bytes([0x00, 0x00, 0x03])  # class 0x030000: VGA controller
    header[0x34] = 0x60  # capabilities pointer
    return bytes(header)


# ---- sections ------------------------------------------------------------------------------


def _write_driver(tree: Path, node: state.SimNode) -> None:
    _write(tree / "sys/module/nvidia/version", node.driver_module + "\n")
    nvml = tree / NVML_DIR
    nvml.mkdir(parents=True, exist_ok=True)
    for old in nvml.glob("libnvidia-ml.so.*"):
        old.unlink()
    library = f"libnvidia-ml.so.{node.driver_library}"
    _write(nvml / library, "")
    (nvml / "libnvidia-ml.so.1").symlink_to(library)


def _write_kernel(tree: Path, node: state.SimNode, release: str) -> None:
    _write(tree / "proc/sys/kernel/osrelease", release + "\n")
    modules = list(_PROC_MODULES_NVIDIA) + (list(_PROC_MODULES_IPVS) if node.ipvs_loaded else [])
    _write(tree / "proc/modules", "".join(m + "\n" for m in modules))
    for installed in {release, node.pending_kernel_release or release}:
        _write_modules_dir(tree / "lib/modules" / installed, node.ipvs_module_available)
    swaps = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
    if node.swap_enabled:
        swaps += "/swap.img                               file\t\t8388604\t\t0\t\t-2\n"
    _write(tree / "proc/swaps", swaps)


def _write_modules_dir(directory: Path, ipvs_available: bool) -> None:
    dep = [
        "kernel/net/netfilter/nf_conntrack.ko: kernel/net/netfilter/nf_defrag_ipv6.ko",
        "kernel/drivers/video/nvidia.ko:",
    ]
    if ipvs_available:
        dep += [
            "kernel/net/netfilter/ipvs/ip_vs.ko: kernel/net/netfilter/nf_conntrack.ko "
            "kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko kernel/lib/libcrc32c.ko",
            "kernel/net/netfilter/ipvs/ip_vs_rr.ko: kernel/net/netfilter/ipvs/ip_vs.ko",
            "kernel/net/netfilter/ipvs/ip_vs_wrr.ko: kernel/net/netfilter/ipvs/ip_vs.ko",
            "kernel/net/netfilter/ipvs/ip_vs_sh.ko: kernel/net/netfilter/ipvs/ip_vs.ko",
        ]
    _write(directory / "modules.dep", "".join(line + "\n" for line in dep))
    builtin = ["kernel/net/ipv4/tcp_cubic.ko", "kernel/drivers/pci/pcie/aer.ko"]
    _write(directory / "modules.builtin", "".join(line + "\n" for line in builtin))


def _write_network(tree: Path, node: state.SimNode) -> None:
    ipvs_conf = tree / "etc/modules-load.d/ipvs.conf"
    if node.ipvs_persisted:
        _write(ipvs_conf, "".join(m + "\n" for m in IPVS_MODULES))
    else:
        ipvs_conf.unlink(missing_ok=True)
    upstream = "".join(f"nameserver {s}\n" for s in node.dns_servers) + "search .\n"
    resolved = tree / "run/systemd/resolve/resolv.conf"
    if node.resolv_stub:
        stub = "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch .\n"
        _write(tree / "etc/resolv.conf", "# This is /run/systemd/resolve/stub-resolv.conf\n" + stub)
        _write(resolved, "# This is /run/systemd/resolve/resolv.conf\n" + upstream)
    else:
        _write(tree / "etc/resolv.conf", upstream)
        resolved.unlink(missing_ok=True)


def _write_services(tree: Path, node: state.SimNode) -> None:
    units = tree / "usr/local/lib/systemd/system"
    wants = tree / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for link in wants.glob("rke2-*.service"):
        link.unlink()
    for unit in ("rke2-agent", "rke2-server"):
        _write(units / f"{unit}.service", f"[Unit]\nDescription=Rancher Kubernetes Engine v2 "
                                          f"({unit.removeprefix('rke2-')})\n")
    for unit in node.rke2_units:
        target = os.path.relpath(units / f"{unit}.service", wants)
        (wants / f"{unit}.service").symlink_to(target)


def _write_packages(tree: Path, node: state.SimNode, release: str) -> None:
    periodic = "1" if node.auto_upgrades else "0"
    _write(tree / "etc/apt/apt.conf.d/20auto-upgrades",
           f'APT::Periodic::Update-Package-Lists "{periodic}";\n'
           f'APT::Periodic::Unattended-Upgrade "{periodic}";\n')
    blacklist = '    "nvidia-";\n    "libnvidia-";\n' if node.nvidia_blacklisted else ""
    _write(tree / "etc/apt/apt.conf.d/50unattended-upgrades",
           "Unattended-Upgrade::Allowed-Origins {\n"
           '    "${distro_id}:${distro_codename}";\n'
           '    "${distro_id}:${distro_codename}-security";\n'
           "};\n"
           f"Unattended-Upgrade::Package-Blacklist {{\n{blacklist}}};\n")
    _write(tree / "var/lib/dpkg/status", _dpkg_status(node, release))


def _dpkg_status(node: state.SimNode, release: str) -> str:
    branch = node.driver_library.split(".", 1)[0]
    want = "hold" if node.packages_held else "install"
    packages = [
        (f"linux-image-{release}", release),
        (f"nvidia-driver-{branch}-open", node.driver_library),
        (f"libnvidia-compute-{branch}", node.driver_library),
    ]
    return "".join(
        f"Package: {name}\nStatus: {want} ok installed\nArchitecture: amd64\n"
        f"Version: {version}-0ubuntu1\n\n"
        for name, version in packages
    )


def _write_pci(tree: Path, gpu: state.SimGpu) -> None:
    port = root_port(gpu.pci)
    port_dir = tree / "sys/devices" / host_bridge(gpu.pci) / port
    device = port_dir / gpu.pci
    _link_pci_device(tree, port, port_dir)
    _link_pci_device(tree, gpu.pci, device)
    _write_root_port(port_dir, gpu)
    _write_bytes(device / "config", config_space(gpu))
    _write(device / "vendor", f"0x{NVIDIA_VENDOR_ID:04x}\n")
    _write(device / "device", f"0x{device_id(gpu.model):04x}\n")
    _write(device / "class", "0x030000\n")
    width = str(gpu.link_width) if gpu.on_bus else "63"
    speed = f"{gpu.link_speed_gts:.1f} GT/s PCIe" if gpu.on_bus else "Unknown"
    _write(device / "current_link_width", width + "\n")
    _write(device / "max_link_width", f"{gpu.link_width_max}\n")
    _write(device / "current_link_speed", speed + "\n")
    _write(device / "max_link_speed", f"{gpu.link_speed_max_gts:.1f} GT/s PCIe\n")
    _write_information(tree, gpu)


def _write_information(tree: Path, gpu: state.SimGpu) -> None:
    fields = {
        "Model": gpu.model,
        "GPU UUID": gpu.uuid,
        "Bus Location": gpu.pci,
        "Device Minor": str(gpu.index),
    }
    path = tree / "proc/driver/nvidia/gpus" / gpu.pci / "information"
    if not path.exists():  # the driver fills it at load; nothing in it changes afterwards
        _write(path, "".join(f"{key}: \t {value}\n" for key, value in fields.items()))


def host_bridge(pci: str) -> str:
    """``pci0000:17`` for a GPU at ``0000:18:00.0``: its root port's bus is numbered one lower."""
    domain, bus = pci.split(":")[:2]
    return f"pci{domain}:{max(int(bus, 16) - 1, 0):02x}"


def root_port(pci: str) -> str:
    """``0000:17:01.0`` for a GPU at ``0000:18:00.0``."""
    return host_bridge(pci).removeprefix("pci") + ":01.0"


AER_CORRECTABLE = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr",
                   "CorrIntErr", "HeaderOF")
AER_UNCORRECTABLE = ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt",
                     "UnxCmplt", "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol",
                     "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr",
                     "PoisonTLPBlocked")


def aer_counters(names: tuple[str, ...], total_name: str, counts: dict[str, int]) -> str:
    """One ``aer_dev_*`` file as the kernel prints it: ``NAME COUNT`` lines, then the total."""
    lines = [f"{name} {counts.get(name, 0)}" for name in names]
    lines.append(f"{total_name} {sum(counts.values())}")
    return "".join(line + "\n" for line in lines)


def _write_root_port(port_dir: Path, gpu: state.SimGpu) -> None:
    surprise_down = {} if gpu.on_bus else {"SDES": 1}
    _write(port_dir / "vendor", "0x8086\n")
    _write(port_dir / "class", "0x060400\n")
    _write(port_dir / "current_link_width", f"{gpu.link_width_max}\n")
    _write(port_dir / "max_link_width", f"{gpu.link_width_max}\n")
    _write(port_dir / "aer_dev_correctable",
           aer_counters(AER_CORRECTABLE, "TOTAL_ERR_COR", {}))
    _write(port_dir / "aer_dev_nonfatal",
           aer_counters(AER_UNCORRECTABLE, "TOTAL_ERR_NONFATAL", {}))
    _write(port_dir / "aer_dev_fatal",
           aer_counters(AER_UNCORRECTABLE, "TOTAL_ERR_FATAL", surprise_down))
    _write(port_dir / "aer_rootport_total_err_cor", "0\n")
    _write(port_dir / "aer_rootport_total_err_nonfatal", "0\n")
    _write(port_dir / "aer_rootport_total_err_fatal", f"{sum(surprise_down.values())}\n")


def _link_pci_device(tree: Path, pci: str, real_dir: Path) -> None:
    """``sys/bus/pci/devices/<pci>`` -> the device's real directory, as a relative symlink."""
    link = tree / "sys/bus/pci/devices" / pci
    link.parent.mkdir(parents=True, exist_ok=True)
    real_dir.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(real_dir, link.parent)
    if link.is_symlink() and os.readlink(link) == target:
        return
    if link.is_symlink():
        link.unlink()
    elif link.is_dir():  # a tree written before the topology existed
        shutil.rmtree(link)
    link.symlink_to(target)


def _write_identity(tree: Path, node: state.SimNode) -> None:
    _write(tree / "proc/sys/kernel/random/boot_id", node.boot_id + "\n")
    _write(tree / "etc/hostname", node.name + "\n")


def _write(path: Path, text: str) -> None:
    _write_bytes(path, text.encode())


def _write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.write_bytes(data)
