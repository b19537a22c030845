"""Kernel-log followers: journald, ``/dev/kmsg`` or a plain file, read from a saved position.

Each follower's ``poll()`` returns at once with the whole lines that arrived since the last
call and the position *after* them (``agent.position``); the daemon counts the lines, then
saves that position. Nothing here blocks on the kernel or a driver: files and ``/dev/kmsg``
are read non-blocking, and journalctl runs as a child process whose output a reader thread
queues. Lines are handed on with a ``[uptime]`` prefix where the source gives one, which is
what ``kernlog.parse`` reads a kernel stamp from.

Between polls the daemon calls ``wait(timeout_s)``, which returns as soon as the source may
have news (the fast path, docs/design.md#fast-path: a GPU off the bus reaches the Node in
milliseconds, not after a poll interval), when ``wake()`` is called (the agent stopping), or
after the timeout, with the thread asleep in ``poll(2)`` meanwhile (``Waiter``): ``/dev/kmsg``
is readable when a record arrives (the kernel's ``devkmsg_poll``), journalctl's reader thread
wakes the waiter for each entry, and a followed file's directory is watched with inotify(7)
through libc, for the file and its rotated copies. Without inotify (no libc function, the
per-user limit of instances reached) a file is read every ``FILE_POLL_S``.

- ``FileFollower`` (``--kernel-log FILE``, tests): inode + offset. A new inode at the path is a
  rotation (the old file is read to its end first, found again by inode as ``FILE.1`` after
  a restart); first bytes that no longer match are a truncation (read from 0); a file shorter
  than the offset but with the same first bytes is being rewritten: wait for it.
- ``KmsgFollower``: one record per ``read()``; sequence numbers count per boot, so the saved
  one is used only when ``/proc/sys/kernel/random/boot_id`` is the saved boot's (after a
  reboot the whole new ring buffer is read).
- ``JournalFollower``: ``journalctl -k -f -o json --no-tail [--after-cursor=C]``; restarted
  from the last cursor when it exits. The journalctl is the image's own, reading the host's
  journal files under ``--root`` (no host binary, no socket).

Every follower says why it cannot read its source (``problem()``, None while it can): the
agent then fails readiness and exports ``gpuguard_agent_kernel_log_readable 0`` rather than
run healthy and blind.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import select
import stat
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from gpuguard.agent import position

MAX_BATCH_BYTES = 1024 * 1024
MAX_BATCH_LINES = 10_000
HEAD_BYTES = 256
KMSG_DEVICE = Path("/dev/kmsg")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
JOURNALCTL = ("journalctl", "-k", "-f", "-o", "json", "--no-tail")


@dataclass(frozen=True, slots=True)
class Batch:
    """Whole lines read by one poll, the position after the last of them (None while nothing
    was ever read), and records the follower could not read at all (bad JSON, bad header)."""

    lines: list[str]
    position: position.Position | None
    unreadable: int = 0


class Follower(Protocol):
    def poll(self) -> Batch: ...

    def wait(self, timeout_s: float) -> None:
        """Return when the source may have news, on ``wake()``, or after ``timeout_s``."""

    def wake(self) -> None:
        """End a ``wait`` in another thread now (the agent is stopping)."""

    def close(self) -> None: ...

    def problem(self) -> str | None: ...


class Waiter:
    """Sleeps in ``poll(2)`` until one of the watched descriptors is readable, ``wake()`` is
    called (from any thread) or the timeout passes: a follower's ``wait``, never a busy loop.

    Its wake pipe is made at the first ``wait`` (a follower that is only polled holds no
    descriptor) and closed once by ``close``; a ``wake`` after that does nothing.
    """

    def __init__(self) -> None:
        self._poller = select.poll()
        self._lock = threading.Lock()
        self._pipe: tuple[int, int] | None = None
        self._woken = False  # woken before the first wait: that wait returns at once
        self._closed = False

    def watch(self, fd: int) -> None:
        self._poller.register(fd, select.POLLIN)

    def wait(self, timeout_s: float) -> list[int]:
        """The watched descriptors that are readable (empty: woken, closed or timed out)."""
        wake_read = self._wake_read()
        if wake_read is None:
            return []
        ready = [fd for fd, _ in self._poller.poll(max(timeout_s, 0.0) * 1000)]
        if wake_read in ready:
            _drain(wake_read)
        return [fd for fd in ready if fd != wake_read]

    def wake(self) -> None:
        with self._lock:
            if self._pipe is not None:
                with contextlib.suppress(BlockingIOError):  # a full pipe is woken already
                    os.write(self._pipe[1], b"\0")
            else:
                self._woken = True

    def close(self) -> None:
        with self._lock:
            pipe, self._pipe, self._closed = self._pipe, None, True
        for fd in pipe or ():
            os.close(fd)

    def _wake_read(self) -> int | None:
        with self._lock:
            if self._pipe is None and not self._closed:
                self._pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
                self._poller.register(self._pipe[0], select.POLLIN)
                if self._woken:
                    os.write(self._pipe[1], b"\0")
            return None if self._pipe is None else self._pipe[0]


def _drain(fd: int) -> bytes:
    """Everything readable on a non-blocking descriptor now."""
    chunks = []
    with contextlib.suppress(BlockingIOError, InterruptedError):
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    return b"".join(chunks)


class Unreadable:
    """A source that could not even be opened (``/dev/kmsg`` without the device): says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self._waiter = Waiter()

    def poll(self) -> Batch:
        return Batch([], None)

    def wait(self, timeout_s: float) -> None:
        self._waiter.wait(timeout_s)

    def wake(self) -> None:
        self._waiter.wake()

    def close(self) -> None:
        self._waiter.close()

    def problem(self) -> str | None:
        return self.reason


def uptime_prefixed(usec: int | None, message: str) -> str:
    """``[  1234.567890] message``: the kernel's stamp, which the Xid parser understands."""
    return message if usec is None else f"[{usec / 1e6:12.6f}] {message}"


# ---- plain file ----------------------------------------------------------------------------


class FileFollower:
    """Follows a kernel log file across rotation and truncation; see the module docstring."""

    def __init__(self, path: Path, start: position.Position | None = None) -> None:
        self.path = path
        self._saved = start if isinstance(start, position.FilePosition) else None
        self._stream: IO[bytes] | None = None
        self._inode = 0
        self._offset = 0
        self._head = b""
        self._rotated = False  # the open stream is a rotated file: switch to path at its end
        self._problem: str | None = None
        self._waiter = Waiter()
        self._watch: DirectoryWatch | None = None

    def poll(self) -> Batch:
        if self._stream is None and not self._open():
            return Batch([], self._position())
        assert self._stream is not None
        moved = self._moved_away()
        self._check_truncation()
        lines = self._read_lines(final=moved)
        if moved and not lines:
            self._switch_to_path()
        return Batch(lines, self._position())

    def wait(self, timeout_s: float) -> None:
        """Until the file or a rotated copy of it changes (inotify on its directory), or
        ``timeout_s``; every ``FILE_POLL_S`` at most without inotify."""
        if self._watch is None:
            self._watch = DirectoryWatch.open(self.path)
            if self._watch.fd is not None:
                self._waiter.watch(self._watch.fd)
                return  # a line written before the watch began would wait a timeout: read now
        if self._watch.fd is None:
            self._waiter.wait(min(timeout_s, FILE_POLL_S))
            return
        deadline = time.monotonic() + timeout_s
        while self._waiter.wait(deadline - time.monotonic()):
            if self._watch.news():
                return
            if time.monotonic() >= deadline:
                return

    def wake(self) -> None:
        self._waiter.wake()

    def close(self) -> None:
        self._close_stream()
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self._waiter.close()

    def problem(self) -> str | None:
        return self._problem

    def _open(self) -> bool:
        saved, self._saved = self._saved, None
        if saved is not None and (rotated := self._rotated_copy(saved.inode)) is not None:
            self._attach(rotated, saved.offset, bytes.fromhex(saved.head))
            self._rotated = True
            return True
        try:
            stream = self.path.open("rb", buffering=0)
        except OSError as e:
            self._problem = f"cannot read kernel log {self.path}: {e.strerror or e}"
            return False
        self._problem = None
        same = saved is not None and os.fstat(stream.fileno()).st_ino == saved.inode
        self._attach(stream, saved.offset if same and saved else 0,
                     bytes.fromhex(saved.head) if same and saved else b"")
        return True

    def _attach(self, stream: IO[bytes], offset: int, head: bytes) -> None:
        self._close_stream()
        self._stream, self._offset, self._head = stream, offset, head
        self._inode = os.fstat(stream.fileno()).st_ino

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _rotated_copy(self, inode: int) -> IO[bytes] | None:
        """The file that was at the path when the position was saved, if it was rotated."""
        with contextlib.suppress(OSError):
            if self.path.stat().st_ino == inode:
                return None
        for candidate in sorted(self.path.parent.glob(self.path.name + ".*")):
            with contextlib.suppress(OSError):
                if candidate.stat().st_ino == inode:
                    return candidate.open("rb", buffering=0)
        return None

    def _moved_away(self) -> bool:
        if self._rotated:
            return True
        try:
            self._rotated = self.path.stat().st_ino != self._inode
        except OSError:
            self._rotated = True
        return self._rotated

    def _switch_to_path(self) -> None:
        self._close_stream()
        self._rotated = False
        self._saved = None
        self._open()

    def _check_truncation(self) -> None:
        """First bytes that differ: truncated and written again, so read from the start.

        Shorter with the same first bytes is a rewrite in progress (the simulator rewrites its
        kern.log in place, as some log shippers do): wait for it to grow back.
        """
        assert self._stream is not None
        current = os.pread(self._stream.fileno(), len(self._head), 0) if self._head else b""
        if current != self._head[: len(current)]:
            self._offset, self._head = 0, b""

    def _read_lines(self, *, final: bool) -> list[str]:
        assert self._stream is not None
        fd = self._stream.fileno()
        data = os.pread(fd, MAX_BATCH_BYTES, self._offset)
        end = data.rfind(b"\n") + 1
        if end == 0 and (len(data) == MAX_BATCH_BYTES or (final and data)):
            end = len(data)  # an over-long line, or the unterminated end of a rotated file
        if end == 0:
            return []
        self._offset += end
        if len(self._head) < HEAD_BYTES:
            self._head = os.pread(fd, min(self._offset, HEAD_BYTES), 0)
        chunk = data[:end].removesuffix(b"\n")  # split on \n only: a stray \r is not a line end
        return [line.decode("utf-8", "replace") for line in chunk.split(b"\n")]

    def _position(self) -> position.Position | None:
        if self._stream is None:
            return self._saved
        return position.FilePosition(self._inode, self._offset, self._head.hex())


FILE_POLL_S = 0.2  # a followed file is read this often where inotify is not to be had
# inotify(7): a file in the watched directory was written, closed after writing, created,
# moved in or out (rotation), deleted (<sys/inotify.h>).
_IN_MODIFY, _IN_CLOSE_WRITE, _IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = (
    0x2, 0x8, 0x40, 0x80, 0x100, 0x200,
)  # fmt: skip
_IN_Q_OVERFLOW = 0x4000  # events were lost: read anyway
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC  # as <sys/inotify.h> defines them
_WATCHED = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name


class DirectoryWatch:
    """An inotify descriptor on a file's directory (not the file: a rotation replaces the file,
    and the directory sees both the rotated copy and the new file), with a filter for the
    events that concern ``FILE`` or ``FILE.*``. ``fd`` is None where inotify is not to be had:
    the caller then polls."""

    def __init__(self, fd: int | None, name: str) -> None:
        self.fd = fd
        self._name = os.fsencode(name)

    @classmethod
    def open(cls, path: Path) -> DirectoryWatch:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        except (OSError, AttributeError):  # no libc to load, or one without inotify
            return cls(None, path.name)
        if fd < 0:  # EMFILE: the per-user limit of instances (fs.inotify.max_user_instances)
            return cls(None, path.name)
        if libc.inotify_add_watch(fd, os.fsencode(path.parent), _WATCHED) < 0:
            os.close(fd)  # no such directory (yet): the caller polls
            return cls(None, path.name)
        return cls(fd, path.name)

    def news(self) -> bool:
        """Whether the events queued since the last call concern the followed file."""
        if self.fd is None:
            return True
        data, offset = _drain(self.fd), 0
        while offset + _EVENT.size <= len(data):
            _, mask, _, size = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + size].rstrip(b"\0")
            offset += _EVENT.size + size
            if mask & _IN_Q_OVERFLOW or name == self._name or name.startswith(self._name + b"."):
                return True
        return False

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


# ---- /dev/kmsg -----------------------------------------------------------------------------


class KmsgFollower:
    """Follows ``/dev/kmsg`` (or a file of records in its format, for tests)."""

    def __init__(
        self,
        start: position.Position | None = None,
        device: Path = KMSG_DEVICE,
        boot_id_path: Path = BOOT_ID,
    ) -> None:
        self.device = device
        self.boot_id = boot_id_path.read_text().strip()
        saved = start if isinstance(start, position.KmsgPosition) else None
        self._last_seq = saved.seq if saved and saved.boot_id == self.boot_id else -1
        self._fd = os.open(device, os.O_RDONLY | os.O_NONBLOCK)
        self._partial = b""
        self.overwritten = 0  # records the ring buffer dropped before they were read
        self._waiter = Waiter()
        self._polled = not stat.S_ISREG(os.fstat(self._fd).st_mode)  # a file always polls ready
        if self._polled:
            self._waiter.watch(self._fd)

    def poll(self) -> Batch:
        lines: list[str] = []
        unreadable = 0
        for record in self._records():
            text, bad = self._line(record)
            unreadable += bad
            if text is not None:
                lines.append(text)
        return Batch(lines, self._position(), unreadable)

    def wait(self, timeout_s: float) -> None:
        """Until the device has a record to read (it polls readable then), or ``timeout_s``;
        a file standing in for it (tests) is read every ``FILE_POLL_S``."""
        self._waiter.wait(timeout_s if self._polled else min(timeout_s, FILE_POLL_S))

    def wake(self) -> None:
        self._waiter.wake()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._waiter.close()

    def problem(self) -> str | None:
        return None  # opened in __init__: a device it cannot open raises there

    def _records(self) -> list[bytes]:
        records: list[bytes] = []
        while len(records) < MAX_BATCH_LINES:
            try:
                chunk = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # EPIPE: the next record was overwritten; go on
                self.overwritten += 1
                continue
            if not chunk:
                break
            data = self._partial + chunk
            end = data.rfind(b"\n") + 1
            self._partial = data[end:]
            records += [r for r in data[:end].split(b"\n") if r and not r.startswith(b" ")]
        return records

    def _line(self, record: bytes) -> tuple[str | None, int]:
        """``pri,seq,usec,flags;message`` → the prefixed message; (None, 1) when unreadable,
        (None, 0) for a record already counted before the restart."""
        header, sep, message = record.partition(b";")
        fields = header.split(b",")
        try:
            seq, usec = int(fields[1]), int(fields[2])
        except (IndexError, ValueError):
            return None, 1
        if not sep or seq <= self._last_seq:
            return None, 0 if sep else 1
        self._last_seq = seq
        return uptime_prefixed(usec, message.decode("utf-8", "replace")), 0

    def _position(self) -> position.Position | None:
        if self._last_seq < 0:
            return None
        return position.KmsgPosition(self.boot_id, self._last_seq)


# ---- journald ------------------------------------------------------------------------------


class JournalProcess(Protocol):
    """What the follower needs of a running journalctl (``subprocess.Popen`` has it)."""

    @property
    def stdout(self) -> IO[str] | None: ...

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


Spawn = Callable[[list[str]], JournalProcess]


def spawn_journalctl(argv: list[str]) -> JournalProcess:
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
        env={**os.environ, "LC_ALL": "C"},
    )


_EOF = None


class JournalFollower:
    """Follows ``journalctl -k -f -o json`` from a saved cursor; respawns it when it exits."""

    def __init__(
        self,
        start: position.Position | None = None,
        spawn: Spawn = spawn_journalctl,
        respawn_delay_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        root: Path = Path("/"),
    ) -> None:
        saved = start if isinstance(start, position.JournalPosition) else None
        self._root = root
        self._cursor = saved.cursor if saved else None
        self._spawn = spawn
        self._respawn_delay_s = respawn_delay_s
        self._monotonic = monotonic
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._process: JournalProcess | None = None
        self._reader: threading.Thread | None = None
        self._exited_at: float | None = None
        self._spawn_error: str | None = None
        self._waiter = Waiter()
        self.spawned = 0

    def problem(self) -> str | None:
        return self._spawn_error or journal_problem(self._root)

    def argv(self) -> list[str]:
        host = [f"--root={self._root}"] if self._root != Path("/") else []  # the host's journal
        after = [f"--after-cursor={self._cursor}"] if self._cursor else []
        return [*JOURNALCTL, *host, *after]

    def poll(self) -> Batch:
        self._ensure_running()
        lines: list[str] = []
        unreadable = 0
        while len(lines) + unreadable < MAX_BATCH_LINES:
            try:
                raw = self._queue.get_nowait()
            except queue.Empty:
                break
            if raw is _EOF:
                self._exited()
                break
            line = self._entry(raw)
            unreadable += line is None
            if line is not None:
                lines.append(line)
        return Batch(lines, self._position(), unreadable)

    def wait(self, timeout_s: float) -> None:
        """Until the reader thread queued an entry (it wakes the waiter), or ``timeout_s``."""
        self._waiter.wait(timeout_s)

    def wake(self) -> None:
        self._waiter.wake()

    def close(self) -> None:
        self._stop_process()
        self._waiter.close()

    def _stop_process(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(OSError):
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=2.0)
        if self._reader is not None:
            self._reader.join(timeout=2.0)
            self._reader = None
        if process is not None and process.stdout is not None:
            process.stdout.close()

    def _ensure_running(self) -> None:
        if self._process is not None:
            return
        if self._exited_at is not None and (
            self._monotonic() - self._exited_at < self._respawn_delay_s
        ):
            return
        try:
            self._process = self._spawn(self.argv())
        except OSError as e:  # no journalctl in the image: say so, retry after the delay
            self._spawn_error = f"cannot start journalctl: {e.strerror or e}"
            self._exited_at = self._monotonic()
            return
        self._spawn_error = None
        self.spawned += 1
        stdout = self._process.stdout
        self._reader = threading.Thread(
            target=_pump,
            args=(stdout, self._queue, self._waiter.wake),
            name="journalctl-reader",
            daemon=True,
        )
        self._reader.start()

    def _exited(self) -> None:
        self._stop_process()
        self._exited_at = self._monotonic()

    def _entry(self, raw: str) -> str | None:
        try:
            entry = json.loads(raw)
            message = _message(entry["MESSAGE"])
            cursor = str(entry["__CURSOR"])
        except (ValueError, KeyError, TypeError):
            return None
        self._cursor = cursor
        return uptime_prefixed(_int(entry.get("__MONOTONIC_TIMESTAMP")), message)

    def _position(self) -> position.Position | None:
        return position.JournalPosition(self._cursor) if self._cursor else None


JOURNAL_DIRS = ("var/log/journal", "run/log/journal")  # persistent, volatile (journald.conf)


def journal_problem(root: Path) -> str | None:
    """Why journalctl would find no journal file it can read under ``root``, or None."""
    found = [p for d in JOURNAL_DIRS for p in (root / d).glob("*/*.journal")]
    if not found:
        where = " or ".join(f"{root / d}" for d in JOURNAL_DIRS)
        return f"no journal files under {where} (volatile-only journal, or not mounted)"
    if not any(os.access(path, os.R_OK) for path in found):
        return f"cannot read the journal files under {found[0].parent}: permission denied"
    return None


def _pump(
    stdout: IO[str] | None, into: queue.SimpleQueue[str | None], wake: Callable[[], None]
) -> None:
    if stdout is not None:
        with contextlib.suppress(OSError, ValueError):
            for line in stdout:
                if line.strip():
                    into.put(line)
                    wake()
    into.put(_EOF)
    wake()


def _message(value: Any) -> str:
    """journald's MESSAGE: a string, or a list of byte values when it is not valid UTF-8."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return bytes(value).decode("utf-8", "replace")
    raise TypeError(f"MESSAGE of type {type(value).__name__}")


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None

