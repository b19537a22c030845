"""The followers' ``wait``: back at once when the kernel log has news, asleep while it has none.

The fast path (docs/design.md#fast-path) waits on the agent's follower: a line that waited
for the next poll cost up to the whole poll interval (issue 28). Bounds here are loose on
purpose (a shared, loaded machine): "at once" is well under a timeout of many seconds, and
"asleep" is at least most of a short timeout.
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuguard.agent import daemon, journal
from gpuguard.sim import kernel_lines
from tests import waits

LONG_S = 30.0  # a wait that must end long before this
SHORT_S = 0.5  # a wait that must sleep (most of) this
PCI = "0000:99:00.0"


def later(action: Callable[[], object], after_s: float = 0.2) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(after_s), action()), daemon=True)
    thread.start()
    return thread


def timed(wait: Callable[[float], None], timeout_s: float) -> float:
    started = time.monotonic()
    wait(timeout_s)
    return time.monotonic() - started


def append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[journal.FileFollower]:
    log = tmp_path / "kern.log"
    log.write_text("")
    follower = journal.FileFollower(log)
    follower.poll()
    follower.wait(0)  # the first wait sets up the watch and returns: read once more
    yield follower
    follower.close()


def test_a_line_appended_ends_the_file_wait_at_once(follower: journal.FileFollower) -> None:
    later(lambda: append(follower.path, "one line\n"))
    assert timed(follower.wait, LONG_S) < LONG_S / 3
    assert follower.poll().lines == ["one line"]


def test_a_file_with_no_news_sleeps_through_other_files_of_its_directory(
    follower: journal.FileFollower,
) -> None:
    later(lambda: append(follower.path.parent / "syslog", "not ours\n"), after_s=0.05)
    assert timed(follower.wait, SHORT_S) >= SHORT_S * 0.8


def test_a_rotation_ends_the_wait_and_the_new_file_is_read(
    follower: journal.FileFollower,
) -> None:
    def rotate() -> None:
        follower.path.rename(follower.path.with_name("kern.log.1"))
        follower.path.write_text("new file\n")

    rotating = later(rotate)
    assert timed(follower.wait, LONG_S) < LONG_S / 3  # woken by the rename already
    rotating.join()
    read = follower.poll().lines + follower.poll().lines
    assert read == ["new file"]


def test_wake_ends_a_wait_from_another_thread(follower: journal.FileFollower) -> None:
    later(follower.wake)
    assert timed(follower.wait, LONG_S) < LONG_S / 3


def test_without_inotify_a_file_is_read_every_file_poll_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    unwatched = journal.DirectoryWatch(None, log.name)  # no libc inotify, or out of instances
    monkeypatch.setattr(journal.DirectoryWatch, "open", lambda path: unwatched)
    follower = journal.FileFollower(log)
    elapsed = [timed(follower.wait, LONG_S) for _ in range(3)]
    follower.close()
    assert all(journal.FILE_POLL_S * 0.8 <= s < LONG_S / 3 for s in elapsed)


def test_kmsg_wait_ends_when_a_record_arrives(tmp_path: Path) -> None:
    device, boot_id = tmp_path / "kmsg", tmp_path / "boot_id"
    os.mkfifo(device)  # polls like the device: readable when a record is there
    boot_id.write_text("boot-a\n")
    follower = journal.KmsgFollower(None, device, boot_id)
    writer = os.open(device, os.O_WRONLY | os.O_NONBLOCK)
    try:
        assert timed(follower.wait, SHORT_S) >= SHORT_S * 0.8
        later(lambda: os.write(writer, b"6,1,5000000,-;NVRM: Xid (PCI:0000:99:00): 79, x\n"))
        assert timed(follower.wait, LONG_S) < LONG_S / 3
        assert follower.poll().lines == ["[    5.000000] NVRM: Xid (PCI:0000:99:00): 79, x"]
    finally:
        os.close(writer)
        follower.close()


class PipedJournalctl:
    """A journalctl child whose output the test writes when it likes."""

    def __init__(self) -> None:
        read, self.write_fd = os.pipe()
        self.stdout: io.TextIOWrapper | None = open(read)  # noqa: SIM115 - closed by the follower

    def poll(self) -> int | None:
        return None

    def kill(self) -> None:
        os.close(self.write_fd)

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_journal_wait_ends_when_journalctl_prints_an_entry() -> None:
    child = PipedJournalctl()
    follower = journal.JournalFollower(None, lambda argv: child)
    assert follower.poll().lines == []  # starts the child
    assert timed(follower.wait, SHORT_S) >= SHORT_S * 0.8
    entry = b'{"MESSAGE": "hello", "__CURSOR": "c1", "__MONOTONIC_TIMESTAMP": "1000000"}\n'
    later(lambda: os.write(child.write_fd, entry))
    assert timed(follower.wait, LONG_S) < LONG_S / 3
    assert follower.poll().lines == ["[    1.000000] hello"]
    follower.close()


def test_the_running_agent_counts_a_line_long_before_its_poll_interval(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    config = daemon.AgentConfig("gpu-node-b", tmp_path / "host", tmp_path / "state",
                                poll_interval_s=LONG_S)
    agent = daemon.Agent(config, lambda start: journal.FileFollower(log, start), list)
    polls = [0]
    follow_once = agent.follow_once

    def counted() -> int:
        polls[0] += 1
        return follow_once()

    agent.follow_once = counted  # type: ignore[method-assign]
    stop = threading.Event()
    running = threading.Thread(target=agent.run, args=(stop,))
    running.start()
    try:
        time.sleep(SHORT_S)
        idle_polls = polls[0]
        started = time.monotonic()
        append(log, kernel_lines.xid(PCI, 79) + "\n")
        assert waits.eventually(lambda: sum(agent.tally.xids.values()) == 1, LONG_S / 3)
        assert time.monotonic() - started < LONG_S / 3
    finally:
        stopping = time.monotonic()
        stop.set()
        running.join(timeout=LONG_S)
    assert not running.is_alive()
    assert time.monotonic() - stopping < LONG_S / 3  # stopping woke the follower's wait
    assert idle_polls <= 3  # asleep while nothing came: no poll loop
