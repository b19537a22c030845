"""Kernel-log followers: every line once, across rotation, truncation, restarts and reboots."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from gpuguard.agent import journal, position


def lines(n: int, tag: str = "line") -> str:
    return "".join(f"Nov 29 10:00:{i:02d} host kernel: {tag} {i}\n" for i in range(n))


def poll_all(follower: journal.Follower) -> list[str]:
    return follower.poll().lines


# ---- plain file ----------------------------------------------------------------------------


def test_file_lines_are_read_once_and_a_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(lines(2))
    follower = journal.FileFollower(log)
    assert len(poll_all(follower)) == 2
    with log.open("a") as f:
        f.write("Nov 29 10:01:00 host kernel: NVRM: Xid (PCI:0000:99:00): 7")
    assert poll_all(follower) == []
    with log.open("a") as f:
        f.write("9, pid='<unknown>'\n")
    read = poll_all(follower)
    assert len(read) == 1
    assert read[0].endswith("NVRM: Xid (PCI:0000:99:00): 79, pid='<unknown>'")
    assert poll_all(follower) == []
    follower.close()


def test_file_rotated_by_rename_is_read_to_its_end_then_the_new_file_from_zero(
    tmp_path: Path,
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(lines(2, "old"))
    follower = journal.FileFollower(log)
    assert len(poll_all(follower)) == 2
    with log.open("a") as f:
        f.write(lines(1, "late"))  # written just before logrotate moved the file
    log.rename(tmp_path / "kern.log.1")
    log.write_text(lines(3, "new"))
    read = poll_all(follower) + poll_all(follower) + poll_all(follower)
    assert [line.split()[-2] for line in read] == ["late", "new", "new", "new"]
    follower.close()


def test_file_truncated_and_refilled_copytruncate_is_read_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(lines(5, "before"))
    follower = journal.FileFollower(log)
    assert len(poll_all(follower)) == 5
    with log.open("r+") as f:
        f.truncate(0)
    assert poll_all(follower) == []
    with log.open("a") as f:
        f.write(lines(2, "after"))
    assert [line.split()[-2] for line in poll_all(follower)] == ["after", "after"]
    follower.close()


def test_file_rewritten_in_place_with_more_lines_yields_only_the_new_ones(tmp_path: Path) -> None:
    """The simulator rewrites kern.log whole; seen half-written, nothing is read twice."""
    log = tmp_path / "kern.log"
    log.write_text(lines(4))
    follower = journal.FileFollower(log)
    assert len(poll_all(follower)) == 4
    log.write_text(lines(4)[:30])  # caught mid-rewrite: shorter, same first bytes
    assert poll_all(follower) == []
    log.write_text(lines(6))
    assert [line.split()[-1] for line in poll_all(follower)] == ["4", "5"]
    follower.close()


def test_file_restart_resumes_at_the_saved_offset(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(lines(3))
    first = journal.FileFollower(log)
    batch = first.poll()
    first.close()
    with log.open("a") as f:
        f.write(lines(1, "while-down"))
    second = journal.FileFollower(log, batch.position)
    assert [line.split()[-2] for line in poll_all(second)] == ["while-down"]
    second.close()


def test_file_rotated_while_the_agent_was_down_is_finished_by_inode(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(lines(3, "old"))
    first = journal.FileFollower(log)
    saved = first.poll().position
    first.close()
    with log.open("a") as f:
        f.write(lines(1, "late"))
    log.rename(tmp_path / "kern.log.1")
    log.write_text(lines(1, "new"))
    second = journal.FileFollower(log, saved)
    read = poll_all(second) + poll_all(second) + poll_all(second)
    assert [line.split()[-2] for line in read] == ["late", "new"]
    second.close()


def test_missing_file_is_waited_for(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    follower = journal.FileFollower(log)
    assert follower.poll() == journal.Batch([], None)
    log.write_text(lines(1))
    assert len(poll_all(follower)) == 1
    follower.close()


# ---- /dev/kmsg -----------------------------------------------------------------------------

XID_RECORD = (
    "3,{seq},{usec},-;NVRM: Xid (PCI:0000:99:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n"
)


def kmsg_device(tmp_path: Path, seqs: range, boot: str) -> tuple[Path, Path]:
    """A file in /dev/kmsg's format (with a continuation line) and a boot_id file."""
    device = tmp_path / "kmsg"
    records = "".join(
        XID_RECORD.format(seq=s, usec=1_000_000 * s + 5) + " SUBSYSTEM=pci\n" for s in seqs
    )
    device.write_text(records)
    boot_id = tmp_path / "boot_id"
    boot_id.write_text(boot + "\n")
    return device, boot_id


def test_kmsg_records_carry_the_uptime_stamp_and_skip_continuation_lines(tmp_path: Path) -> None:
    device, boot_id = kmsg_device(tmp_path, range(3), "boot-a")
    follower = journal.KmsgFollower(None, device, boot_id)
    batch = follower.poll()
    follower.close()
    assert len(batch.lines) == 3
    assert batch.lines[1].startswith("[    1.000005] NVRM: Xid (PCI:0000:99:00): 79")
    assert batch.position == position.KmsgPosition("boot-a", 2)


@pytest.mark.parametrize(
    ("saved", "expected_seqs"),
    [
        pytest.param(position.KmsgPosition("boot-a", 3), [4, 5], id="same-boot-resumes-after-seq"),
        pytest.param(position.KmsgPosition("boot-old", 3), [0, 1, 2, 3, 4, 5],
                     id="after-reboot-reads-the-new-boot-from-the-start"),
        pytest.param(None, [0, 1, 2, 3, 4, 5], id="first-start-reads-the-ring-buffer"),
    ],
)
def test_kmsg_restart_uses_the_saved_seq_only_within_the_same_boot(
    tmp_path: Path, saved: position.KmsgPosition | None, expected_seqs: list[int]
) -> None:
    device, boot_id = kmsg_device(tmp_path, range(6), "boot-a")
    follower = journal.KmsgFollower(saved, device, boot_id)
    batch = follower.poll()
    follower.close()
    assert [float(line[1:13]) for line in batch.lines] == [s + 0.000005 for s in expected_seqs]


def test_kmsg_unreadable_header_is_counted_not_read(tmp_path: Path) -> None:
    device, boot_id = kmsg_device(tmp_path, range(1), "boot-a")
    with device.open("a") as f:
        f.write("garbage without a header\n")
    follower = journal.KmsgFollower(None, device, boot_id)
    batch = follower.poll()
    follower.close()
    assert (len(batch.lines), batch.unreadable) == (1, 1)


# ---- journald ------------------------------------------------------------------------------


class FakeJournalctl:
    """Stands for a journalctl child: prints the given lines, then exits."""

    def __init__(self, output: list[str]) -> None:
        self.stdout: io.StringIO | None = io.StringIO("".join(line + "\n" for line in output))
        self.killed = False

    def poll(self) -> int | None:
        return None

    def kill(self) -> None:
        self.killed = True

    def wait(self, timeout: float | None = None) -> int:
        return 0


def entry(message: object, cursor: str, usec: int = 2_500_000) -> str:
    return json.dumps({"MESSAGE": message, "__CURSOR": cursor, "__MONOTONIC_TIMESTAMP": str(usec)})


class Spawner:
    def __init__(self, *outputs: list[str]) -> None:
        self.outputs = list(outputs)
        self.argvs: list[list[str]] = []

    def __call__(self, argv: list[str]) -> FakeJournalctl:
        self.argvs.append(argv)
        return FakeJournalctl(self.outputs.pop(0) if self.outputs else [])


WAIT_S = 30.0  # for the follower's reader thread on a loaded machine; passing tests end early


def poll_until(follower: journal.JournalFollower, want: int) -> journal.Batch:
    deadline = time.monotonic() + WAIT_S
    lines: list[str] = []
    unreadable = 0
    while time.monotonic() < deadline:
        batch = follower.poll()
        lines += batch.lines
        unreadable += batch.unreadable
        if len(lines) + unreadable >= want:
            return journal.Batch(lines, batch.position, unreadable)
        time.sleep(0.01)
    raise AssertionError(f"only {lines} after {WAIT_S}s")


def test_journal_messages_cursor_and_unreadable_entries() -> None:
    spawn = Spawner([
        entry("NVRM: GPU at PCI:0000:99:00: GPU-aaaa", "c1"),
        "{not json",
        entry(list(b"NVRM: Xid (PCI:0000:99:00): 79, \xff"), "c2"),
    ])
    follower = journal.JournalFollower(None, spawn)
    batch = poll_until(follower, 3)
    follower.close()
    assert spawn.argvs == [list(journal.JOURNALCTL)]
    assert batch.lines[0] == "[    2.500000] NVRM: GPU at PCI:0000:99:00: GPU-aaaa"
    assert batch.lines[1].endswith("79, \ufffd")
    assert (batch.unreadable, batch.position) == (1, position.JournalPosition("c2"))


def test_journal_resumes_after_the_saved_cursor_and_respawns_from_the_last_one() -> None:
    clock = [0.0]
    spawn = Spawner([entry("one", "c8")], [entry("two", "c9")])
    follower = journal.JournalFollower(
        position.JournalPosition("c7"), spawn, respawn_delay_s=5, monotonic=lambda: clock[0]
    )
    assert poll_until(follower, 1).lines == ["[    2.500000] one"]
    deadline = time.monotonic() + WAIT_S
    later: list[str] = []
    while not later and time.monotonic() < deadline:
        later += follower.poll().lines  # sees journalctl's end, waits out the delay, respawns
        time.sleep(0.01)
        clock[0] += 1
    assert later == ["[    2.500000] two"]
    assert clock[0] >= 5
    follower.close()
    assert [argv[-1] for argv in spawn.argvs] == ["--after-cursor=c7", "--after-cursor=c8"]


def test_journal_of_a_mounted_host_root_is_read_with_journalctl_root() -> None:
    follower = journal.JournalFollower(position.JournalPosition("c7"), root=Path("/host"))
    assert follower.argv() == [*journal.JOURNALCTL, "--root=/host", "--after-cursor=c7"]


def test_spawn_journalctl_runs_a_real_child_and_the_follower_reaps_it(tmp_path: Path) -> None:
    script = tmp_path / "journalctl"
    script.write_text(f"#!/bin/sh\necho '{entry('hello', 'c1')}'\nexec sleep 30\n")
    script.chmod(0o755)

    def spawn(argv: list[str]) -> journal.JournalProcess:
        return journal.spawn_journalctl([str(script), *argv[1:]])

    follower = journal.JournalFollower(None, spawn)
    assert poll_until(follower, 1).lines == ["[    2.500000] hello"]
    follower.close()
    assert follower.spawned == 1  # and no ResourceWarning: child killed, reaped, pipe closed
