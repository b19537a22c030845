"""Read-only access to a host's files under a root, as if that root were ``/``.

The agent sees the host at ``/host``; the host's own symlinks are often absolute
(``/var/lib/rancher/rke2/bin -> /var/lib/rancher/rke2/data/<release>/bin``, merged-usr ``/lib``),
so following them naively would read the *container's* files. :func:`resolve` follows every
symlink inside ``root``. Errors carry the host path (``/etc/resolv.conf``), never the root
prefix, so they can be shown as evidence.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from gpuguard import errors

MAX_SYMLINK_HOPS = 40
MAX_READ_BYTES = 64 * 1024 * 1024
# Small reads: /proc/sys files allocate a kernel buffer of the requested size (ENOMEM on 64 MiB).
READ_CHUNK_BYTES = 64 * 1024


class HostReadError(errors.GpuguardError):
    """A host file could not be read; the message names it as seen from the host root."""


def shown(rel: str) -> str:
    """How a host path is written in evidence: absolute from the host's point of view."""
    return "/" + rel.strip("/")


def resolve(root: Path, rel: str) -> Path:
    """The real path of host path ``rel``, following symlinks without leaving ``root``."""
    done: list[str] = []
    todo = list(PurePosixPath(rel.lstrip("/")).parts)
    hops = 0
    while todo:
        name = todo.pop(0)
        if name in ("", ".", "/"):
            continue
        if name == "..":
            if done:
                done.pop()
            continue
        candidate = root.joinpath(*done, name)
        if not candidate.is_symlink():
            done.append(name)
            continue
        hops += 1
        if hops > MAX_SYMLINK_HOPS:
            raise HostReadError(f"{shown(rel)}: too many levels of symbolic links")
        target = PurePosixPath(os.readlink(candidate))
        if target.is_absolute():
            done = []
        todo = [part for part in target.parts if part != "/"] + todo
    return root.joinpath(*done)


def exists(root: Path, rel: str) -> bool:
    """Whether host path ``rel`` exists (after following symlinks inside root)."""
    try:
        return resolve(root, rel).exists()
    except (HostReadError, OSError):
        return False


def read_text(root: Path, rel: str) -> str:
    """The text of host file ``rel``; HostReadError naming it when missing or unreadable."""
    try:
        data = _read_bounded(resolve(root, rel))
    except FileNotFoundError as e:
        raise HostReadError(f"{shown(rel)}: not found") from e
    except OSError as e:
        raise HostReadError(f"{shown(rel)}: cannot read ({e.strerror or e})") from e
    return data.decode("utf-8", errors="replace")


def _read_bounded(path: Path) -> bytes:
    chunks: list[bytes] = []
    size = 0
    with path.open("rb", buffering=0) as stream:
        while size < MAX_READ_BYTES and (chunk := stream.read(READ_CHUNK_BYTES)):
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


def list_dir(root: Path, rel: str) -> list[str]:
    """Sorted entry names of host directory ``rel``; HostReadError when missing/unreadable."""
    try:
        return sorted(entry.name for entry in resolve(root, rel).iterdir())
    except FileNotFoundError as e:
        raise HostReadError(f"{shown(rel)}: not found") from e
    except OSError as e:
        raise HostReadError(f"{shown(rel)}: cannot list ({e.strerror or e})") from e


def link_target(root: Path, rel: str) -> str | None:
    """The raw target of symlink ``rel`` (its parents resolved), or None if not a symlink."""
    parent, _, name = rel.strip("/").rpartition("/")
    path = resolve(root, parent) / name
    return os.readlink(path) if path.is_symlink() else None
