"""The programs the evidence Job runs (journalctl, dmesg, nvidia-smi): its own, never the host's.

The Job has no chroot and no host ``/usr``: running host binaries would need CAP_SYS_CHROOT
and the host's libraries, i.e. far more of the host than evidence needs. Instead:

- ``journalctl`` is in gpuguard's image and reads the host's journal *files* under the root
  (``journalctl --root /host``: ``/host/var/log/journal``, mounted read-only);
- ``nvidia-smi`` is put into the container by the NVIDIA container toolkit (the Job's
  ``runtimeClassName`` with ``NVIDIA_DRIVER_CAPABILITIES=utility``; see NVIDIA's container
  toolkit documentation), so it always matches the host's driver;
- ``dmesg`` is the image's; the ring buffer needs CAP_SYSLOG where ``kernel.dmesg_restrict``
  is set, which the Job does not have, so it answers only on hosts that allow it.

Programs are run by name through a ``CommandRunner`` with a hard timeout; one that is not in
the container answers ``NOT_FOUND`` (the shell's 127), which the evidence records.
"""

from __future__ import annotations

from pathlib import Path

NOT_FOUND = 127


def root_args(program: str, root: Path) -> list[str]:
    """Arguments that point ``program`` at the host tree under ``root`` (none for ``/``)."""
    if program == "journalctl" and root.resolve() != Path("/"):
        return ["--root", str(root)]
    return []
