"""The processes on each GPU, from /proc fd links only (the phantom incident
(docs/design.md#incidents): the phantom GPUs had none; the incident library: never touch the GPU you
watch): counts per GPU, driver daemons left out, and a scan that ran out of budget or could not read
a process never exports a zero."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuguard.agent import daemon, exporter, gpu_processes, journal
from gpuguard.model import metric_names as names

NODE = "gpu-node-1"
CARDS = {  # minor -> (bus location as the driver writes it, UUID)
    "0": ("0000:17:00.0", "GPU-aaaaaaaa-0000-0000-0000-000000000000"),
    "3": ("0000:65:00.0", "GPU-dddddddd-0000-0000-0000-000000000003"),
    "5": ("0000:b3:00.0", "GPU-ffffffff-0000-0000-0000-000000000005"),
}


def add_process(root: Path, pid: int, comm: str, *targets: str) -> Path:
    folder = root / "proc" / str(pid)
    (folder / "fd").mkdir(parents=True)
    (folder / "comm").write_text(comm + "\n")
    for fd, target in enumerate(targets):
        os.symlink(target, folder / "fd" / str(fd))  # dangling on purpose: never opened
    return folder


def add_cards(root: Path) -> None:
    for minor, (bus, uuid) in CARDS.items():
        folder = root / gpu_processes.GPU_INFORMATION / bus
        folder.mkdir(parents=True)
        (folder / "information").write_text(
            f"Model: NVIDIA H100\nGPU UUID: {uuid}\nBus Location: {bus}\nDevice Minor: {minor}\n"
        )


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """The phantom incident's node: a trainer on GPU 0 (two fds, one process), one on GPU 3, a CUDA
    control-only process, nvidia-persistenced on every GPU, and one PID with no fd folder
    (exited between listing /proc and reading it)."""
    add_cards(tmp_path)
    add_process(tmp_path, 101, "python", "/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia0")
    add_process(tmp_path, 102, "python", "/dev/nvidia-uvm", "/dev/nvidia3", "socket:[42]")
    add_process(tmp_path, 103, "ray::IDLE", "/dev/nvidiactl", "/dev/nvidia-uvm-tools")
    add_process(tmp_path, 104, "nvidia-persiste", *(f"/dev/nvidia{m}" for m in CARDS))
    (tmp_path / "proc" / "105").mkdir()  # vanished: /proc/105/fd is gone
    (tmp_path / "proc" / "self").symlink_to("101")
    return tmp_path


@pytest.fixture
def unreadable(host: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """PID 106's fd folder refuses us (EACCES), as it does for an agent without ptrace."""
    folder = add_process(host, 106, "python", "/dev/nvidia5")
    real = os.scandir

    def scandir(path: str | os.PathLike[str]) -> Iterator[os.DirEntry[str]]:
        if Path(path) == folder / "fd":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return "106"


def test_counts_the_processes_holding_each_gpu_and_not_the_driver_daemons(host: Path) -> None:
    found = gpu_processes.scan(host)
    assert found.by_minor == {"0": 1, "3": 1}
    assert found.complete
    assert found.processes == 4  # 101..104; 105 exited


def test_a_complete_scan_reports_every_gpu_the_driver_lists_zeros_included(host: Path) -> None:
    report = gpu_processes.report(gpu_processes.scan(host), gpu_processes.read_cards(host))
    assert report.complete
    assert [(c.card.minor, c.card.uuid, c.processes) for c in report.counts] == [
        ("0", CARDS["0"][1], 1),
        ("3", CARDS["3"][1], 1),
        ("5", CARDS["5"][1], 0),
    ]


def test_an_unreadable_process_makes_the_scan_incomplete_without_zeros(
    host: Path, unreadable: str
) -> None:
    found = gpu_processes.scan(host)
    assert found.by_minor == {"0": 1, "3": 1}
    assert not found.complete
    assert unreadable in found.incomplete
    report = gpu_processes.report(found, gpu_processes.read_cards(host))
    assert [c.card.minor for c in report.counts] == ["0", "3"]  # no zero vouched for GPU 5


def ticking(step: float) -> Callable[[], float]:
    now = [0.0]

    def clock() -> float:
        now[0] += step
        return now[0]

    return clock


BUDGETS = [
    pytest.param({"max_fds": 2}, "fd budget", id="100k-fds-fd-budget"),
    pytest.param({"budget_s": 1.0, "monotonic": ticking(0.4)}, "time budget", id="slow-proc-time"),
]


@pytest.mark.parametrize(("limits", "why"), BUDGETS)
def test_a_spent_budget_stops_the_scan_and_exports_no_zeros(
    host: Path, limits: dict[str, object], why: str
) -> None:
    found = gpu_processes.scan(host, **limits)  # type: ignore[arg-type]
    assert why in found.incomplete
    report = gpu_processes.report(found, gpu_processes.read_cards(host))
    assert all(c.processes > 0 for c in report.counts)
    assert not report.complete


def test_no_proc_is_an_incomplete_scan_not_an_empty_gpu(tmp_path: Path) -> None:
    found = gpu_processes.scan(tmp_path / "missing")
    assert not found.complete
    assert gpu_processes.report(found, []).counts == ()


def test_a_process_on_a_gpu_the_driver_does_not_list_keeps_its_minor(tmp_path: Path) -> None:
    add_process(tmp_path, 7, "python", "/dev/nvidia9")
    report = gpu_processes.report(gpu_processes.scan(tmp_path), [])
    assert [(c.card, c.processes) for c in report.counts] == [
        (gpu_processes.GpuCard("9", "", ""), 1)
    ]


def series(c: exporter.AgentCollector) -> dict[tuple[str, ...], float]:
    registry = exporter.registry_for(c)
    return {
        (s.name, *(s.labels.get(k, "") for k in ("node", "gpu", "pci", "uuid"))): s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.name in (names.GPU_PROCESSES, names.GPU_PROCESS_SCAN_COMPLETE)
    }


def test_the_agent_exports_counts_with_node_gpu_pci_uuid_labels_each_check_cycle(
    host: Path, tmp_path: Path
) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    config = daemon.AgentConfig(NODE, host, tmp_path / "state")
    agent = daemon.Agent(config, lambda start: journal.FileFollower(log, start), list)
    assert series(agent.collector) == {}  # before the first cycle: nothing, not zeros
    agent.check_once()
    agent.follower.close()
    bus, uuid = CARDS["0"]
    assert series(agent.collector) == {
        (names.GPU_PROCESSES, NODE, "0", bus, uuid): 1,
        (names.GPU_PROCESSES, NODE, "3", *CARDS["3"]): 1,
        (names.GPU_PROCESSES, NODE, "5", *CARDS["5"]): 0,
        (names.GPU_PROCESS_SCAN_COMPLETE, NODE, "", "", ""): 1,
    }


def test_an_incomplete_scan_exports_scan_complete_zero_and_only_held_gpus(
    host: Path, unreadable: str
) -> None:
    c = exporter.AgentCollector(NODE, exporter.Tally())
    found = gpu_processes.scan(host)
    c.processes = gpu_processes.report(found, gpu_processes.read_cards(host))
    assert series(c) == {
        (names.GPU_PROCESSES, NODE, "0", *CARDS["0"]): 1,
        (names.GPU_PROCESSES, NODE, "3", *CARDS["3"]): 1,
        (names.GPU_PROCESS_SCAN_COMPLETE, NODE, "", "", ""): 0,
    }
