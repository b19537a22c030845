"""Running the host's own programs (journalctl, dmesg, nvidia-smi) from the evidence Job.

The Job sees the host at ``--root`` (``/host``); the host's binaries need the host's libraries,
so a program is looked up under the root and run through ``chroot <root>`` (the Job holds
CAP_SYS_CHROOT, the lifecycle report (docs/design.md#incidents)). On a host itself (``--root /``) it
runs directly. With the GPU Operator the driver's tools live in the driver container's root
filesystem, which the operator exposes on the host at ``/run/nvidia/driver``: a program found only
there runs chrooted into it. Every run goes through a ``CommandRunner`` with a hard timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuguard.agent.checks import hostfs

BINARY_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "usr/local/bin")
HOST = ""
DRIVER_CONTAINER = "run/nvidia/driver"


@dataclass(frozen=True, slots=True)
class HostProgram:
    """A program found under a root: ``path`` inside ``root``, ``shown`` from the host's view."""

    root: Path
    path: str
    shown: str

    def argv(self, args: Sequence[str]) -> list[str]:
        """The command line that runs it against ``root``: chroot unless root is ``/``."""
        if self.root.resolve() == Path("/"):
            return [self.path, *args]
        return ["chroot", str(self.root), self.path, *args]


def find(root: Path, name: str, places: Sequence[str] = (HOST,)) -> HostProgram | None:
    """The first ``name`` in BINARY_DIRS under each of ``places`` (host paths), or None."""
    for place in places:
        for directory in BINARY_DIRS:
            rel = f"{place}/{directory}/{name}".lstrip("/")
            if hostfs.exists(root, rel):
                base = root / place if place else root
                return HostProgram(base, f"/{directory}/{name}", hostfs.shown(rel))
    return None
