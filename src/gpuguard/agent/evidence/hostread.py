"""Bounded, read-only reads of host files under a root, for evidence.

``agent.checks.hostfs`` resolves paths inside the root; this adds what evidence needs on top:
a byte limit (a PCI config space is read for at most 256 bytes) and a refusal of anything that
is not a regular file, because opening a FIFO would block the Job forever. Every failure is a
``hostfs.HostReadError`` naming the host path, so the caller turns it into UNKNOWN evidence.
"""

from __future__ import annotations

import stat
from pathlib import Path

from gpuguard.agent.checks import hostfs

TEXT_LIMIT_BYTES = 64 * 1024


def read_bytes(root: Path, rel: str, limit: int) -> bytes:
    """At most ``limit`` bytes of host file ``rel``; HostReadError when it cannot be read."""
    try:
        path = hostfs.resolve(root, rel)
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise hostfs.HostReadError(f"{hostfs.shown(rel)}: not a regular file")
        with path.open("rb", buffering=0) as stream:
            return stream.read(limit)
    except FileNotFoundError as e:
        raise hostfs.HostReadError(f"{hostfs.shown(rel)}: not found") from e
    except OSError as e:
        raise hostfs.HostReadError(f"{hostfs.shown(rel)}: cannot read ({e.strerror or e})") from e


def read_text(root: Path, rel: str, limit: int = TEXT_LIMIT_BYTES) -> str:
    return read_bytes(root, rel, limit).decode("utf-8", errors="replace")


def read_line(root: Path, rel: str) -> str:
    """The stripped text of a one-value file (sysfs attribute, hostname, boot id)."""
    return read_text(root, rel).strip()


def optional_line(root: Path, rel: str) -> str | None:
    """Like read_line, but None when the file cannot be read."""
    try:
        return read_line(root, rel) or None
    except hostfs.HostReadError:
        return None
