"""The kernel-log Xid parser: every real line shape, the stream's context (PCI → UUID, the
multi-line fall-off message), Xid 154 / 94 / 95 details, and garbage that must never crash."""

from __future__ import annotations

import io
import random
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuguard.errors import InputError
from gpuguard.kernlog import parse, scan
from gpuguard.model import xid

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference"
REAL_LINES = REFERENCE / "kernel_xid_lines.txt"
MIXED_JOURNAL = Path(__file__).resolve().parents[1] / "data" / "kernlog" / "mixed_journal.log"

UUID_A = "GPU-509665ad-b600-ac93-3616-d754b23d636d"


def events_of(*lines: str, year: int | None = None) -> list[xid.KernelEvent]:
    return list(parse.parse_lines(lines, parse.XidLogParser(year=year)))


def only_event(line: str, year: int | None = None) -> xid.KernelEvent:
    events = events_of(line, year=year)
    assert len(events) == 1, events
    return events[0]


# --- every Xid line of the reference file of real lines -----------------------------------------


def real_line_groups() -> dict[str, list[str]]:
    """The data file's groups (each ``# ---- title`` starts one), as their log lines only."""
    groups: dict[str, list[str]] = {}
    lines: list[str] = []
    for raw in REAL_LINES.read_text(encoding="utf-8").splitlines():
        if raw.startswith("# ----"):
            title = re.sub(r"[^a-z0-9]+", "-", raw.removeprefix("# ----").lower()).strip("-")
            lines = groups.setdefault(f"{len(groups)}-{title[:40]}", [])
        elif groups and raw.strip() and not raw.startswith("#"):
            lines.append(raw)
    return groups


def expected_from_text(line: str, earlier_lines: list[str]) -> tuple[int, str, str | None]:
    """Xid, PCI and UUID as a human reads them off the line and the lines above it."""
    code_match = re.search(r"\): (\d+)", line)
    slot_match = re.search(r"\((?:PCI:)?(\w{4}:\w\w:\w\w)", line)
    assert code_match is not None, line
    assert slot_match is not None, line
    code, slot = int(code_match[1]), slot_match[1].lower()
    uuid = None
    for earlier in earlier_lines:
        if f"gpu at pci:{slot}: " in earlier.lower():
            found = re.search(r"GPU-[0-9a-f]{8}-[0-9a-f-]{27}", earlier)
            uuid = found.group() if found else None
    return code, f"{slot}.0", uuid


def test_the_real_lines_file_has_groups_to_check() -> None:
    groups = real_line_groups().values()
    xid_lines = [line for group in groups for line in group if "NVRM: Xid" in line]
    assert len(xid_lines) >= 50


@pytest.mark.parametrize("group_name", list(real_line_groups()))
def test_every_real_xid_line_gives_its_xid_pci_and_uuid(group_name: str) -> None:
    group = real_line_groups()[group_name]
    events = {event.line_no: event for event in parse.parse_lines(group)}
    xid_line_nos = {no for no, line in enumerate(group, start=1) if "NVRM: Xid" in line}

    for line_no in sorted(xid_line_nos):
        line = group[line_no - 1]
        code, pci, uuid = expected_from_text(line, group[: line_no - 1])
        event = events.get(line_no)
        assert event is not None, f"no event for {line!r}"
        assert (event.kind, event.xid, event.pci, event.uuid) == (
            xid.KernelEventKind.XID,
            code,
            pci,
            uuid,
        )
    assert {no for no, e in events.items() if e.kind is xid.KernelEventKind.XID} == xid_line_nos


def test_the_real_fall_off_message_is_one_event_and_nothing_is_malformed() -> None:
    parser = parse.XidLogParser()
    lines = [line for group in real_line_groups().values() for line in group]
    events = list(parse.parse_lines(lines, parser))
    fall_offs = [e for e in events if e.kind is xid.KernelEventKind.FALLEN_OFF_BUS]
    assert [(e.pci, e.xid, e.uptime_s) for e in fall_offs] == [("0000:b3:00.0", None, 1843.308145)]
    assert "The NVIDIA GPU 0000:b3:00.0" in lines[fall_offs[0].line_no - 1]
    assert (parser.stats.malformed, parser.stats.lines_read) == (0, len(lines))


# --- line shapes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param(
            "[ 1451.785035] NVRM: Xid (PCI:0000:01:00): 31, pid=35097, name=SpaceEngine.exe, "
            "channel 0x0000005c, intr 00000000. MMU Fault: ENGINE GRAPHICS",
            (
                31,
                "0000:01:00.0",
                35097,
                "SpaceEngine.exe",
                None,
                1451.785035,
                "channel 0x0000005c, intr 00000000. MMU Fault: ENGINE GRAPHICS",
            ),
            id="raw-dmesg-uptime",
        ),
        pytest.param(
            "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, Graphics Exception: ESR",
            (
                13,
                "0000:cb:00.0",
                None,
                None,
                datetime(2024, 8, 30, 11, 43, 9, tzinfo=UTC),
                None,
                "Graphics Exception: ESR",
            ),
            id="dmesg-T-ctime",
        ),
        pytest.param(
            "[Mon Aug  5 03:54:13 2024] NVRM: Xid (PCI:0000:00:07): 31, pid=2512125, "
            "name=python3.10, Ch 00000008",
            (
                31,
                "0000:00:07.0",
                2512125,
                "python3.10",
                datetime(2024, 8, 5, 3, 54, 13, tzinfo=UTC),
                None,
                "Ch 00000008",
            ),
            id="dmesg-T-single-digit-day",
        ),
        pytest.param(
            "kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid (PCI:0000:41:00): 79, "
            "pid=1234, name=python3, GPU has fallen off the bus.",
            (
                79,
                "0000:41:00.0",
                1234,
                "python3",
                datetime(2025, 1, 21, 4, 41, 44, 283302, tzinfo=UTC),
                None,
                "GPU has fallen off the bus.",
            ),
            id="dmesg-iso-comma-fraction",
        ),
        pytest.param(
            "Nov 29 11:28:11 zeus kernel: NVRM: Xid (PCI:0000:c1:00): 31, pid=12890, Ch 0000003b",
            (31, "0000:c1:00.0", 12890, None, None, None, "Ch 0000003b"),
            id="syslog-no-year-no-timestamp",
        ),
        pytest.param(
            "Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:07:00): 48, "
            "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE)",
            (
                48,
                "0000:07:00.0",
                None,
                None,
                None,
                219.470994,
                "An uncorrectable double bit error (DBE)",
            ),
            id="syslog-with-kernel-uptime-unknown-pid",
        ),
        pytest.param(
            "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 "
            "caused by previous Xid 149",
            (
                45,
                "0000:dc:00.0",
                1818990,
                "python3",
                None,
                None,
                "Ch 00000001 caused by previous Xid 149",
            ),
            id="journalctl-no-hostname",
        ),
        pytest.param(
            "192.168.11.119: kern: warning: [2026-04-22T21:25:20.505406921Z]: NVRM: Xid "
            "(PCI:0000:01:00): 43, pid=3188489, name=trigger_xid, channel 0x0b00000a",
            (
                43,
                "0000:01:00.0",
                3188489,
                "trigger_xid",
                datetime(2026, 4, 22, 21, 25, 20, 505406, tzinfo=UTC),
                None,
                "channel 0x0b00000a",
            ),
            id="talos-console-nanoseconds",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.",
            (79, "0000:06:00.0", None, None, None, None, "GPU has fallen off the bus."),
            id="bare-pasted-line",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed from 0x4 "
            "(Drain and Reset) to 0x1 (GPU Reset Required)",
            (
                154,
                "0019:01:00.0",
                None,
                None,
                None,
                None,
                "GPU recovery action changed from 0x4 (Drain and Reset) "
                "to 0x1 (GPU Reset Required)",
            ),
            id="gb200-non-zero-domain",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
            "RST: No, D-RST: No",
            (
                94,
                "0000:01:00.0",
                7194,
                None,
                None,
                None,
                "Contained: CE User Channel (0x9). RST: No, D-RST: No",
            ),
            id="mig-gpu-instance",
        ),
        pytest.param(
            "NVRM: Xid (0000:03:00): 14, Channel 00000001",
            (14, "0000:03:00.0", None, None, None, None, "Channel 00000001"),
            id="old-driver-without-pci-prefix",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping",
            (
                63,
                "0000:10:1c.0",
                1896,
                None,
                None,
                None,
                "Row Remapper: New row marked for remapping",
            ),
            id="pid-without-name",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:0c:00): 31, pid=11461,",
            (31, "0000:0c:00.0", 11461, None, None, None, ""),
            id="pid-then-nothing-older",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=ray::WorkerDict, "
            "RLW_RXPIPE Nonfatal",
            (145, "0018:01:00.0", 876767, "ray::WorkerDict", None, None, "RLW_RXPIPE Nonfatal"),
            id="truncated-process-name",
        ),
        pytest.param(
            "Xid errors on instance: ip-26-0-146-100, Error: May 19 07:08:57 ip-26-0-146-100 "
            "kernel: [680111.646286] NVRM: Xid (PCI:0000:10:1c): 63, pid=1850, Row Remapper",
            (63, "0000:10:1c.0", 1850, None, None, 680111.646286, "Row Remapper"),
            id="wrapped-by-an-alerting-tool",
        ),
        pytest.param(
            "NVRM: Xid (PCI:...): 79, GPU has fallen off the bus.",
            (79, None, None, None, None, None, "GPU has fallen off the bus."),
            id="redacted-pci",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:90:1c): 64, ...\r",
            (64, "0000:90:1c.0", None, None, None, None, "..."),
            id="crlf-and-author-ellipsis",
        ),
    ],
)
def test_each_line_shape_gives_its_fields(
    line: str,
    expected: tuple[int, str | None, int | None, str | None, datetime | None, float | None, str],
) -> None:
    event = only_event(line)
    assert (
        event.xid,
        event.pci,
        event.pid,
        event.process,
        event.timestamp,
        event.uptime_s,
        event.message,
    ) == expected
    assert event.line_no == 1
    assert event.kind is xid.KernelEventKind.XID


@pytest.mark.parametrize(
    ("line", "year", "expected"),
    [
        pytest.param(
            "Nov 29 11:28:11 zeus kernel: NVRM: Xid (PCI:0000:c1:00): 31, Ch 0000003b",
            2024,
            datetime(2024, 11, 29, 11, 28, 11, tzinfo=UTC),
            id="syslog-with-year",
        ),
        pytest.param(
            "Nov 29 11:28:11.250000 zeus kernel: NVRM: Xid (PCI:0000:c1:00): 31, Ch 0000003b",
            2024,
            datetime(2024, 11, 29, 11, 28, 11, 250000, tzinfo=UTC),
            id="journalctl-short-precise",
        ),
        pytest.param(
            "Feb 30 11:28:11 zeus kernel: NVRM: Xid (PCI:0000:c1:00): 31, Ch 0000003b",
            2024,
            None,
            id="impossible-date-is-no-timestamp",
        ),
        pytest.param(
            "2025-01-21T04:41:44+0100 node kernel: NVRM: Xid (PCI:0000:c1:00): 31, Ch 0000003b",
            None,
            datetime(2025, 1, 21, 4, 41, 44, tzinfo=timezone(timedelta(hours=1))),
            id="journalctl-short-iso-with-offset",
        ),
    ],
)
def test_absolute_times(line: str, year: int | None, expected: datetime | None) -> None:
    assert only_event(line, year=year).timestamp == expected


def test_zoneless_times_take_the_parsers_zone() -> None:
    tokyo = timezone(timedelta(hours=9))
    parser = parse.XidLogParser(tz=tokyo)
    event = parser.feed("[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, x", 1)
    assert event is not None
    assert event.timestamp == datetime(2024, 8, 30, 11, 43, 9, tzinfo=tokyo)


# --- Xid 154 recovery action, Xid 94/95 reset flags -----------------------------------------------


@pytest.mark.parametrize(
    ("new_action", "expected"),
    [
        pytest.param("0x0 (None)", xid.RecoveryAction.NONE, id="none"),
        pytest.param("0x1 (GPU Reset Required)", xid.RecoveryAction.GPU_RESET_REQUIRED, id="reset"),
        pytest.param(
            "0x2 (Node Reboot Required)", xid.RecoveryAction.NODE_REBOOT_REQUIRED, id="reboot"
        ),
        pytest.param("0x3 (Drain P2P)", xid.RecoveryAction.DRAIN_P2P, id="drain-p2p"),
        pytest.param("0x4 (Drain and Reset)", xid.RecoveryAction.DRAIN_AND_RESET, id="drain-reset"),
        pytest.param("0x4 (DRAIN AND  RESET)", xid.RecoveryAction.DRAIN_AND_RESET, id="any-case"),
        pytest.param("0x2", xid.RecoveryAction.NODE_REBOOT_REQUIRED, id="value-without-name"),
        pytest.param("0x5 (Recover IMEX Domain)", xid.RecoveryAction.OTHER, id="newer-unknown"),
    ],
)
def test_xid_154_recovery_action_is_normalised(
    new_action: str, expected: xid.RecoveryAction
) -> None:
    line = (
        "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) "
        f"to {new_action}"
    )
    assert only_event(line).recovery_action is expected


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        pytest.param(
            154,
            "GPU recovery action: something new",
            xid.RecoveryAction.OTHER,
            id="154-unreadable-is-other",
        ),
        pytest.param(79, "GPU has fallen off the bus.", None, id="not-154-has-none"),
        pytest.param(
            13,
            "recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
            None,
            id="only-154-carries-an-action",
        ),
    ],
)
def test_only_xid_154_carries_a_recovery_action(
    code: int, message: str, expected: xid.RecoveryAction | None
) -> None:
    assert only_event(f"NVRM: Xid (PCI:0000:01:00): {code}, {message}").recovery_action is expected


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        pytest.param("Contained: SM (0x1). RST: No, D-RST: No", (), id="94-neither"),
        pytest.param("Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No", ("RST",), id="95-rst"),
        pytest.param("Uncontained: FBHUB. RST: No, D-RST: Yes", ("D-RST",), id="95-drain-reset"),
        pytest.param(
            "Uncontained: DRAM (0x1, 0x0). physAddr: 0x00001000 RST: Yes, D-RST: Yes",
            ("RST", "D-RST"),
            id="95-both",
        ),
        pytest.param("Contained: SM (0x1).", (), id="flags-absent"),
    ],
)
def test_xid_94_95_reset_flags(tail: str, expected: tuple[str, ...]) -> None:
    line = f"NVRM: Xid (PCI:0000:01:00): 95, pid='<unknown>', name=<unknown>, {tail}"
    assert only_event(line).reset_flags == expected


# --- stream context: PCI → UUID -----------------------------------------------------------------


def test_uuid_line_names_the_card_of_later_events_of_that_slot_only() -> None:
    events = events_of(
        "NVRM: Xid (PCI:0000:9b:00): 119, before the mapping",
        f"NVRM: GPU at PCI:0000:9b:00: {UUID_A}",
        "NVRM: Xid (PCI:0000:9b:00): 119, after the mapping",
        "NVRM: Xid (PCI:0000:9c:00): 119, another slot",
    )
    assert [e.uuid for e in events] == [None, UUID_A, None]


def test_a_newer_uuid_line_for_the_slot_replaces_the_card() -> None:
    other = "GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d"
    events = events_of(
        f"NVRM: GPU at PCI:0000:01:00: {UUID_A}",
        f"NVRM: GPU at PCI:0000:01:00: {other}",
        "NVRM: Xid (PCI:0000:01:00): 31, x",
        "NVRM: GPU at PCI:0000:01:00: GPU-<uuid redacted>",
        "NVRM: Xid (PCI:0000:01:00): 31, y",
    )
    assert [e.uuid for e in events] == [other, None]


def test_each_parser_is_one_stream() -> None:
    first = parse.XidLogParser()
    first.feed(f"NVRM: GPU at PCI:0000:01:00: {UUID_A}", 1)
    event = parse.XidLogParser().feed("NVRM: Xid (PCI:0000:01:00): 31, x", 1)
    assert event is not None
    assert event.uuid is None


# --- the multi-line fall-off message ------------------------------------------------------------


FALL_OFF = [
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
    "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
    "               NVRM: fallen off the bus and is not responding to commands.",
    "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).",
]


def test_fall_off_message_is_one_event_at_its_first_line_with_the_cards_uuid() -> None:
    events = events_of(f"NVRM: GPU at PCI:0000:b3:00: {UUID_A}", *FALL_OFF)
    assert len(events) == 1
    event = events[0]
    assert (event.kind, event.xid, event.pci, event.uuid) == (
        xid.KernelEventKind.FALLEN_OFF_BUS,
        None,
        "0000:b3:00.0",
        UUID_A,
    )
    assert (event.line_no, event.uptime_s) == (2, 1843.308145)
    assert event.message == (
        "The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has "
        "fallen off the bus and is not responding to commands."
    )


def test_fall_off_message_through_journald_with_lines_between() -> None:
    events = events_of(
        "Mar  3 10:00:06 n7 kernel: NVRM: The NVIDIA GPU 0000:86:00.0",
        "Mar  3 10:00:06 n7 kernel: eth0: link up",
        "Mar  3 10:00:06 n7 kernel: NVRM: (PCI ID: 10de:2330) installed in this system has",
        "Mar  3 10:00:06 n7 kernel: NVRM: fallen off the bus and is not responding to commands.",
        year=2025,
    )
    assert [(e.kind, e.pci, e.line_no) for e in events] == [
        (xid.KernelEventKind.FALLEN_OFF_BUS, "0000:86:00.0", 1)
    ]
    assert events[0].timestamp == datetime(2025, 3, 3, 10, 0, 6, tzinfo=UTC)


def test_a_different_the_nvidia_gpu_message_is_no_event() -> None:
    assert (
        events_of(
            "NVRM: The NVIDIA GPU 0000:01:00.0",
            "NVRM: (PCI ID: 10de:1b80) installed in this system is",
            "NVRM: not supported by the NVIDIA 470 driver release.",
        )
        == []
    )


def test_a_stale_first_line_is_not_joined_to_a_much_later_fall_off() -> None:
    lines = [
        "NVRM: The NVIDIA GPU 0000:b3:00.0",
        *["unrelated"] * 10,
        "NVRM: GPU has fallen off the bus.",
    ]
    assert [(e.line_no, e.pci) for e in events_of(*lines)] == [(12, None)]


def test_one_line_fall_off_names_its_own_pci() -> None:
    event = only_event("[  99.000001] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.")
    assert (event.kind, event.pci, event.xid) == (
        xid.KernelEventKind.FALLEN_OFF_BUS,
        "0000:3b:00.0",
        None,
    )


# --- garbage --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("NVRM: Xid (PCI:0000:01:00): oops", id="code-not-a-number"),
        pytest.param("NVRM: Xid", id="marker-only"),
        pytest.param("NVRM: Xid (PCI:0000:01:00 31, x", id="unclosed-parenthesis"),
        pytest.param("NVRM: Xid (PCI:0000:01:00): 31 x", id="no-comma-after-code"),
        pytest.param("NVRM: Xid (PCI:0000:01:00): 1234567, x", id="code-too-long"),
    ],
)
def test_unreadable_xid_lines_are_skipped_and_counted(line: str) -> None:
    parser = parse.XidLogParser()
    lines = ["ok line", line, "NVRM: Xid (PCI:0000:01:00): 31, fine"]
    events = list(parse.parse_lines(lines, parser))
    assert [e.line_no for e in events] == [3]
    assert parser.stats == parse.ParseStats(
        lines_read=3, events=1, malformed=1, first_malformed=[2]
    )


def test_other_garbage_is_read_but_not_malformed() -> None:
    parser = parse.XidLogParser()
    lines = ["", "\x00\x01", "NVRM:", "NVRM: GPU at PCI:zz: GPU-1", "Xid 79 without the prefix"]
    assert list(parse.parse_lines(lines, parser)) == []
    assert parser.stats == parse.ParseStats(lines_read=5)


def test_only_the_first_malformed_line_numbers_are_kept() -> None:
    parser = parse.XidLogParser()
    list(parse.parse_lines(["NVRM: Xid ?"] * 25, parser))
    assert parser.stats.malformed == 25
    assert parser.stats.first_malformed == list(range(1, parse.MALFORMED_SAMPLE_SIZE + 1))


# --- the file scanner ---------------------------------------------------------------------------


def test_scanning_the_mixed_journal_fixture() -> None:
    parser = parse.XidLogParser(year=2025)
    events = list(scan.scan_file(MIXED_JOURNAL, parser))
    summary = [(e.line_no, e.kind.value, e.xid, e.pci, e.uuid) for e in events]
    assert summary == [
        (4, "xid", 79, "0000:3b:00.0", "GPU-11111111-2222-3333-4444-555555555555"),
        (6, "xid", 154, "0000:86:00.0", None),
        (8, "fallen_off_bus", None, "0000:86:00.0", None),
        (11, "xid", 48, None, None),
    ]
    assert events[1].recovery_action is xid.RecoveryAction.NODE_REBOOT_REQUIRED
    assert parser.stats == parse.ParseStats(
        lines_read=11, events=4, malformed=1, first_malformed=[5]
    )


def mixed_log(seed: int, line_count: int) -> bytes:
    """Real lines and noise in random order, some CRLF, some not UTF-8."""
    real = REAL_LINES.read_text(encoding="utf-8").splitlines()
    noise = ["kernel: eth0: link up", "", "x" * 300, "NVRM: loading NVIDIA UNIX driver"]
    rng = random.Random(seed)
    lines = [rng.choice(real + noise).encode() for _ in range(line_count)]
    lines += [b"\xff\xfe NVRM: Xid (PCI:0000:01:00): 13, bad \xc3 bytes", b"NVRM: Xid ?\r"]
    rng.shuffle(lines)
    return b"\n".join(lines)


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 4096, scan.CHUNK_SIZE], ids=lambda n: f"chunk{n}")
@pytest.mark.parametrize("trailing_newline", [True, False], ids=["newline-end", "no-newline-end"])
def test_scanning_finds_exactly_what_feeding_every_line_finds(
    chunk_size: int, trailing_newline: bool
) -> None:
    data = mixed_log(seed=7, line_count=400) + (b"\n" if trailing_newline else b"")
    fed = parse.XidLogParser()
    expected = list(parse.parse_lines(data.decode("utf-8", "replace").splitlines(), fed))
    scanned = parse.XidLogParser()
    assert list(scan.scan_file(io.BytesIO(data), scanned, chunk_size=chunk_size)) == expected
    assert scanned.stats == fed.stats
    assert fed.stats.malformed >= 1


@pytest.mark.parametrize(
    ("data", "lines"),
    [
        pytest.param(b"", 0, id="empty"),
        pytest.param(b"\n", 1, id="one-empty-line"),
        pytest.param(b"a\nb", 2, id="last-line-unterminated"),
        pytest.param(b"a\nb\n", 2, id="last-line-terminated"),
    ],
)
def test_lines_read_counts_every_line(data: bytes, lines: int) -> None:
    parser = parse.XidLogParser()
    list(scan.scan_file(io.BytesIO(data), parser))
    assert parser.stats.lines_read == lines


def test_the_marker_is_found_where_find_finds_it_however_many_vs_come_first() -> None:
    """The scan memchr's for the V of ``NVRM:`` (its rarest byte); text dense in V hands the
    rest of a search to the regex engine: the same leftmost hit either way."""
    rng = random.Random(2812)
    for _ in range(300):
        size = rng.randrange(1, 6000)
        buffer = bytearray(rng.choices(b"NVRM:V\nx", weights=[2, 30, 2, 2, 2, 30, 1, 5], k=size))
        for _ in range(rng.randrange(3)):
            at = rng.randrange(size)
            buffer[at:at] = b"NVRM:"
        start = rng.randrange(len(buffer))
        end = rng.randrange(start, len(buffer) + 1)
        assert scan._find(buffer, start, end) == buffer.find(b"NVRM:", start, end)


def test_an_xid_line_after_a_run_of_vs_keeps_its_line_number() -> None:
    data = (b"V" * 70_000 + b"\n") * 3 + b"[ 1.0] NVRM: Xid (PCI:0000:01:00): 13, x\n"
    parser = parse.XidLogParser()
    events = list(scan.scan_file(io.BytesIO(data), parser, chunk_size=4096))
    assert [(e.line_no, e.xid) for e in events] == [(4, 13)]
    assert parser.stats.lines_read == 4


def test_random_bytes_never_crash() -> None:
    rng = random.Random(20261129)
    for _ in range(50):
        junk = bytearray(rng.randbytes(rng.randrange(1, 5000)))
        for marker in (b"NVRM: Xid (PCI:", b"NVRM: The NVIDIA GPU ", b"): 79, ", b"\n"):
            at = rng.randrange(len(junk))
            junk[at:at] = marker
        parser = parse.XidLogParser(year=2025)
        list(scan.scan_file(io.BytesIO(bytes(junk)), parser, chunk_size=rng.choice([3, 100, 4096])))
        assert parser.stats.lines_read == junk.count(b"\n") + (not junk.endswith(b"\n"))


def mutated(line: str, rng: random.Random) -> str:
    """``line`` with a random edit of the kind corruption and truncation make."""
    at = rng.randrange(len(line) + 1)
    digits = [i for i, char in enumerate(line) if char.isdigit()] or [at]
    edits = [
        lambda: line[:at] + rng.choice("0x9(),:'=- \x00\ufffd") + line[at:],
        lambda: line[:at] + line[at + rng.randrange(1, 20) :],
        lambda: line[:at],
        lambda: line[: rng.choice(digits)] + "9" * 5000 + line[rng.choice(digits) :],
        lambda: line.replace("0x", "0x" + "f" * rng.randrange(1, 40), 1),
    ]
    return rng.choice(edits)()


def test_corrupted_real_lines_never_crash_the_parser() -> None:
    rng = random.Random(4242)
    real = [line for group in real_line_groups().values() for line in group]
    parser = parse.XidLogParser(year=2025)
    for line_no in range(1, 3001):
        parser.feed(mutated(rng.choice(real), rng), line_no)
    assert parser.stats.lines_read == 3000
    assert parser.stats.events + parser.stats.malformed > 0


def test_an_endless_line_is_cut_and_later_lines_keep_their_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scan, "MAX_LINE_BYTES", 100)
    data = (
        b"NVRM: Xid (PCI:0000:01:00): 31, " + b"z" * 1000 + b"\nNVRM: Xid (PCI:0000:02:00): 13, x\n"
    )
    parser = parse.XidLogParser()
    events = list(scan.scan_file(io.BytesIO(data), parser, chunk_size=64))
    assert [(e.line_no, e.xid) for e in events] == [(1, 31), (2, 13)]
    assert parser.stats.lines_read == 2


def test_a_missing_file_is_an_input_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such.log"
    with pytest.raises(InputError, match=r"no-such\.log"):
        list(scan.scan_file(missing))


def test_a_directory_is_an_input_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=re.escape(str(tmp_path))):
        list(scan.scan_file(tmp_path))


@pytest.mark.parametrize(
    ("line", "pci", "address"),
    [
        pytest.param("NVRM: GPU 18:00.0: GPU has fallen off the bus.", "0000:18:00.0", "",
                     id="domain-less-bdf-keeps-its-address"),
        pytest.param("NVRM: Xid (invalid): 79, GPU has fallen off the bus.", None, "invalid",
                     id="invalid-address-keeps-its-raw-text"),
        pytest.param("NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception", "0000:01:00.0",
                     "PCI:0000:01:00", id="address-as-written"),
    ],
)
def test_addresses_are_kept(line: str, pci: str | None, address: str) -> None:
    (event,) = parse.parse_lines([line])
    assert (event.pci, event.address) == (pci, address)
