"""Where the agent is in the kernel log, and what it has counted up to there, kept on disk.

The agent exports ``gpuguard_xid_total`` as a counter. Surviving a restart needs two things
saved together, in one file, replaced atomically (temp file + fsync + rename):

- the **position** (a journald cursor, a ``/dev/kmsg`` boot id + sequence number, or a file's
  inode + offset), so a restarted agent does not read the same Xid lines again;
- the **counts** up to that position, so the restarted agent's counters continue from where
  they were. Without them every series would fall back to 0: Prometheus reads a drop as a
  counter reset, and ``increase()`` over a window holding the restart then adds the new value
  on top of the old one (1 → restart → 0 → 1 reads as 2 Xids). Without the position the agent
  would re-read the log and count the same lines a second time (1 → 2 for one Xid).

The file is written only after the lines up to the position have been counted, so a crash
between counting and saving re-reads (and re-counts into the *saved* counts) those lines:
never a loss, never a double count.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuguard import errors

STATE_FILE = "agent-state.json"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class FilePosition:
    """A plain file: its inode, the offset after the last whole line read, and its first
    bytes (hex), which tell a rewrite of the same content from a truncation."""

    inode: int
    offset: int
    head: str = ""


@dataclass(frozen=True, slots=True)
class KmsgPosition:
    """``/dev/kmsg``: the boot the sequence numbers belong to and the last one read."""

    boot_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class JournalPosition:
    """journald: the ``__CURSOR`` of the last entry read."""

    cursor: str


Position = FilePosition | KmsgPosition | JournalPosition
_KINDS: dict[str, type[FilePosition] | type[KmsgPosition] | type[JournalPosition]] = {
    "file": FilePosition,
    "kmsg": KmsgPosition,
    "journal": JournalPosition,
}


@dataclass(frozen=True, slots=True)
class Saved:
    """What one state file holds: the position (None before the first save) and the counts
    (the exporter's ``Tally.as_json()``)."""

    position: Position | None = None
    counts: dict[str, Any] = field(default_factory=dict)


def state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def load(state_dir: Path) -> Saved:
    """The saved state; an empty one when there is no file yet. InputError naming the file
    when it exists but cannot be read (the agent must not silently start counting from 0)."""
    path = state_path(state_dir)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return Saved()
    except (OSError, ValueError) as e:
        raise errors.InputError(
            f"agent state {path}: unreadable ({e}); move it away to start counting afresh"
        ) from e
    return _from_json(raw, path)


def save(state_dir: Path, saved: Saved) -> None:
    """Replace the state file atomically: a reader (or a crash) sees the old or the new one."""
    write_file(state_dir, STATE_FILE, json.dumps(_to_json(saved), separators=(",", ":")).encode())


def write_file(state_dir: Path, name: str, data: bytes) -> None:
    """Replace ``state_dir/name`` atomically (temp file + fsync + rename)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", dir=state_dir)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, state_dir / name)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _to_json(saved: Saved) -> dict[str, Any]:
    position = None
    if saved.position is not None:
        kind = next(k for k, cls in _KINDS.items() if isinstance(saved.position, cls))
        position = {"kind": kind, **_fields(saved.position)}
    return {"version": FORMAT_VERSION, "position": position, "counts": saved.counts}


def _fields(position: Position) -> dict[str, Any]:
    return {name: getattr(position, name) for name in position.__slots__}


def _from_json(raw: Any, path: Path) -> Saved:
    if not isinstance(raw, dict) or raw.get("version") != FORMAT_VERSION:
        raise errors.InputError(f"agent state {path}: not a version {FORMAT_VERSION} state file")
    counts = raw.get("counts") or {}
    if not isinstance(counts, dict):
        raise errors.InputError(f"agent state {path}: 'counts' is not an object")
    return Saved(_position(raw.get("position"), path), counts)


def _position(raw: Any, path: Path) -> Position | None:
    if raw is None:
        return None
    try:
        fields = dict(raw)
        cls = _KINDS[fields.pop("kind")]
        return cls(**fields)
    except (KeyError, TypeError, ValueError) as e:
        raise errors.InputError(f"agent state {path}: bad position {raw!r}") from e
