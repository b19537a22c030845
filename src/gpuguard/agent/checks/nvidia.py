"""``nvidia-match``: does the loaded NVIDIA kernel module match the NVML library on disk?

The lifecycle report (docs/design.md#incidents) (May 21): unattended-upgrades replaced the driver
packages under a running module; until the reboot every new NVML user (nvidia-smi, dcgm-exporter,
the device plugin) failed while the node stayed Ready with 8 GPUs. The comparison reads only sysfs
and library file names — never nvidia-smi, which can hang in D state on a stuck driver (the incident
library: monitoring must never harm the hardware it watches).

Decisions: versions equal → PASS; different → FAIL with both. No module loaded: NVIDIA GPUs on
the PCI bus → FAIL (a GPU node without a driver is not conformant); no GPU and no library →
PASS (not a GPU node); no GPU but a library → WARN. A module without any library found, or no
readable PCI bus → UNKNOWN.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpuguard.agent.checks import hostfs, result

NAME = "nvidia-match"

MODULE_VERSION = "sys/module/nvidia/version"
PCI_DEVICES = "sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"
DISPLAY_CLASS_PREFIX = "0x03"  # VGA / 3D controller; NVSwitch bridges (0x0680) are not GPUs
LIBRARY_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib64",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib",
    "run/nvidia/driver/usr/lib/x86_64-linux-gnu",  # GPU Operator driver container
    "run/nvidia/driver/usr/lib64",
    "run/nvidia/driver/usr/lib/aarch64-linux-gnu",
)
_NVML_FILE = re.compile(r"^libnvidia-ml\.so\.(\d+(?:\.\d+)+)$")


@dataclass(frozen=True, slots=True)
class NvmlLibrary:
    path: str  # host path, as shown in evidence
    version: str


def loaded_module_version(root: Path) -> str | None:
    """The loaded module's version, None when the nvidia module is not loaded."""
    if not hostfs.exists(root, "sys/module"):
        raise hostfs.HostReadError("/sys/module: not found (is sysfs mounted under the root?)")
    if not hostfs.exists(root, "sys/module/nvidia"):
        return None
    version = hostfs.read_text(root, MODULE_VERSION).strip()
    if not version:
        raise hostfs.HostReadError(f"{hostfs.shown(MODULE_VERSION)}: empty")
    return version


def _libraries_in(root: Path, directory: str) -> list[NvmlLibrary]:
    """The NVML the loader would use from one directory: the .so.1 link's target if present."""
    names = hostfs.list_dir(root, directory)
    if "libnvidia-ml.so.1" in names:
        target = hostfs.link_target(root, f"{directory}/libnvidia-ml.so.1")
        name = Path(target).name if target else ""
        if match := _NVML_FILE.match(name):
            return [NvmlLibrary(hostfs.shown(f"{directory}/{name}"), match.group(1))]
    return [
        NvmlLibrary(hostfs.shown(f"{directory}/{name}"), match.group(1))
        for name in names
        if (match := _NVML_FILE.match(name))
    ]


def installed_libraries(root: Path) -> list[NvmlLibrary]:
    found: list[NvmlLibrary] = []
    seen_dirs: set[Path] = set()
    for directory in LIBRARY_DIRS:
        real = hostfs.resolve(root, directory)
        if real in seen_dirs or not real.is_dir():
            continue
        seen_dirs.add(real)
        found.extend(_libraries_in(root, directory))
    return found


def nvidia_gpu_count(root: Path) -> int:
    """NVIDIA display/3D functions on the PCI bus (sysfs vendor/class files only)."""
    count = 0
    for device in hostfs.list_dir(root, PCI_DEVICES):
        base = f"{PCI_DEVICES}/{device}"
        vendor = hostfs.read_text(root, f"{base}/vendor").strip().lower()
        klass = hostfs.read_text(root, f"{base}/class").strip().lower()
        count += vendor == NVIDIA_VENDOR and klass.startswith(DISPLAY_CLASS_PREFIX)
    return count


def _describe(libraries: list[NvmlLibrary]) -> str:
    return ", ".join(f"{lib.version} ({lib.path})" for lib in libraries)


def _compare(module: str, libraries: list[NvmlLibrary]) -> result.CheckResult:
    module_part = f"kernel module {module} ({hostfs.shown(MODULE_VERSION)})"
    if not libraries:
        return result.unknown(
            NAME, f"{module_part} but no libnvidia-ml.so.<version> in {', '.join(LIBRARY_DIRS)}"
        )
    mismatched = [lib for lib in libraries if lib.version != module]
    if not mismatched:
        return result.passed(NAME, f"{module_part} matches NVML {_describe(libraries)}")
    return result.failed(
        NAME,
        f"{module_part} != NVML {_describe(mismatched)}: new NVML users "
        "(nvidia-smi, dcgm-exporter, device plugin) fail until the module is reloaded",
        "drain the node and reboot it so the kernel loads the installed driver "
        "(or reinstall the driver version of the loaded module)",
    )


def _without_module(root: Path, libraries: list[NvmlLibrary]) -> result.CheckResult:
    gpus = nvidia_gpu_count(root)
    library_part = f"NVML {_describe(libraries)}" if libraries else "no NVML library"
    if gpus:
        return result.failed(
            NAME,
            f"{gpus} NVIDIA GPU(s) in {hostfs.shown(PCI_DEVICES)} but the nvidia module is not "
            f"loaded ({library_part})",
            "check the driver build for the running kernel (dkms status), then: modprobe nvidia",
        )
    if libraries:
        return result.warned(NAME, f"no NVIDIA GPU and no nvidia module, yet {library_part}")
    return result.passed(NAME, "no NVIDIA GPU, kernel module or NVML library on this host")


def check(root: Path = Path("/")) -> result.CheckResult:
    module = loaded_module_version(root)
    libraries = installed_libraries(root)
    if module is None:
        return _without_module(root, libraries)
    return _compare(module, libraries)
