"""The agent loop: counted before saved, restarts neither lose nor double-count an Xid."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import httpx
import pytest

from gpuguard import errors, metrics_http
from gpuguard.agent import daemon, journal, position
from gpuguard.agent.checks import result
from gpuguard.model import decisions
from gpuguard.model import metric_names as names
from gpuguard.sim import kernel_lines
from gpuguard.sim import podresources as kubelet
from tests import waits

PCI = "0000:99:00.0"
UUID = "GPU-3d1e2f7a-1b2c-4d5e-8f90-123456789abc"
XID79 = {"node": "gpu-node-b", "gpu": "", "uuid": UUID, "pci": PCI, "xid": "79", "rule": ""}


def no_checks() -> list[result.CheckResult]:
    return []


def make_agent(tmp_path: Path, log: Path, checks: daemon.CheckRun = no_checks) -> daemon.Agent:
    config = daemon.AgentConfig("gpu-node-b", tmp_path / "host", tmp_path / "state")
    return daemon.Agent(config, lambda start: journal.FileFollower(log, start), checks)


def xid79(agent: daemon.Agent) -> float | None:
    return agent.registry.get_sample_value(names.XID_TOTAL, XID79)


def append(log: Path, *lines: str) -> None:
    with log.open("a") as f:
        f.writelines(line + "\n" for line in lines)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "kern.log"
    append(path, kernel_lines.gpu_at(PCI, UUID), kernel_lines.xid(PCI, 79))
    return path


def test_restart_restores_counts_and_position_so_one_more_xid_reads_two(
    tmp_path: Path, log: Path
) -> None:
    first = make_agent(tmp_path, log)
    first.follow_once()
    assert xid79(first) == 1
    first.follower.close()

    second = make_agent(tmp_path, log)
    assert xid79(second) == 1  # before reading anything: counters never go down
    append(log, kernel_lines.xid(PCI, 79))
    second.follow_once()
    assert xid79(second) == 2  # not 3: the first line was not read again
    second.follower.close()


def test_a_crash_between_counting_and_saving_recounts_from_the_saved_state_once(
    tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(state_dir: Path, saved: position.Saved) -> None:
        raise OSError("disk full")

    doomed = make_agent(tmp_path, log)
    with monkeypatch.context() as patch:
        patch.setattr(position, "save", crash)
        with pytest.raises(OSError, match="disk full"):
            doomed.follow_once()
    assert xid79(doomed) == 1  # counted in memory, never saved
    doomed.follower.close()

    restarted = make_agent(tmp_path, log)
    restarted.follow_once()
    assert xid79(restarted) == 1  # read again from the last saved position: once, not lost
    restarted.follower.close()


def test_position_is_saved_only_with_the_counts_that_reach_it(
    tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saves: list[tuple[position.Position | None, int]] = []
    real_save = position.save

    def record(state_dir: Path, saved: position.Saved) -> None:
        xids = sum(row[-1] for row in saved.counts["xids"])
        saves.append((saved.position, xids))
        real_save(state_dir, saved)

    monkeypatch.setattr(position, "save", record)
    agent = make_agent(tmp_path, log)
    agent.follow_once()
    agent.follow_once()  # nothing new: nothing saved
    agent.follower.close()
    assert len(saves) == 1
    saved_position, xids = saves[0]
    assert isinstance(saved_position, position.FilePosition)
    assert saved_position.offset == log.stat().st_size
    assert xids == 1


def test_unreadable_state_file_stops_the_agent_with_the_path(tmp_path: Path, log: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / position.STATE_FILE).write_text("{half")
    with pytest.raises(errors.InputError, match=r"agent-state\.json"):
        make_agent(tmp_path, log)


def nvidia_mismatch() -> list[result.CheckResult]:
    return [result.failed("nvidia-match", "module 580.126.09 != NVML 580.142")]


def test_run_serves_counts_and_check_status_until_stopped(tmp_path: Path, log: Path) -> None:
    agent = make_agent(tmp_path, log, nvidia_mismatch)
    stop = threading.Event()
    with metrics_http.serve(agent.exposition, agent.healthy, "127.0.0.1", 0) as server:
        runner = threading.Thread(target=agent.run, args=(stop,))
        runner.start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with httpx.Client() as client:
            body = _wait_for(client, f"{url}/metrics", 'status="FAIL"} 1.0')
            health = client.get(f"{url}/healthz").status_code
        stop.set()
        runner.join(timeout=10)
    assert f'gpuguard_xid_total{{gpu="",node="gpu-node-b",pci="{PCI}"' in body
    assert "gpuguard_nvml_mismatch{node=\"gpu-node-b\"} 1.0" in body
    assert health == 200
    assert not runner.is_alive()


def _wait_for(client: httpx.Client, url: str, needle: str) -> str:
    def served() -> bool:
        body = client.get(url).text
        return needle in body and "gpuguard_xid_total{" in body

    # a deadline rather than a count of tries: each try takes longer on a loaded machine
    assert waits.eventually(served, 60, every_s=0.02), f"{needle!r} not in {url}"
    return client.get(url).text  # what was served stays: counts and the last cycle's status


def test_check_cycle_records_the_status_of_each_check(tmp_path: Path, log: Path) -> None:
    agent = make_agent(tmp_path, log, nvidia_mismatch)
    cycle = agent.check_once()
    agent.follower.close()
    assert [r.status for r in cycle.results] == [decisions.CheckStatus.FAIL]
    labels = {"node": "gpu-node-b", "check": "nvidia-match", "status": "FAIL"}
    assert agent.registry.get_sample_value(names.CHECK_STATUS, labels) == 1


def test_healthz_turns_false_when_the_follower_stops_polling(tmp_path: Path, log: Path) -> None:
    clock = [1000.0]
    config = daemon.AgentConfig("gpu-node-b", tmp_path, tmp_path / "state", poll_interval_s=1.0)
    agent = daemon.Agent(config, lambda start: journal.FileFollower(log, start), no_checks,
                         monotonic=lambda: clock[0])
    agent.follow_once()
    assert agent.healthy()
    clock[0] += daemon.STALE_POLLS * config.poll_interval_s + 6  # a read hung for that long
    assert not agent.healthy()
    agent.follow_once()
    assert agent.healthy()
    agent.follower.close()


READABLE = {"node": "gpu-node-b"}


def test_an_agent_that_cannot_read_its_kernel_log_says_so_once_and_is_not_ready(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "kern.log"
    agent = make_agent(tmp_path, missing)
    with caplog.at_level("WARNING", logger="gpuguard.agent.daemon"):
        agent.follow_once()
        agent.follow_once()
    assert agent.healthy(), "alive: the loop runs"
    assert not agent.ready()
    assert agent.registry.get_sample_value(names.AGENT_KERNEL_LOG_READABLE, READABLE) == 0
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == (
        f"kernel log unreadable: cannot read kernel log {missing}: No such file or directory"
    )
    append(missing, kernel_lines.xid(PCI, 79))
    agent.follow_once()
    assert agent.ready()
    assert agent.registry.get_sample_value(names.AGENT_KERNEL_LOG_READABLE, READABLE) == 1
    agent.follower.close()


def test_a_kmsg_the_container_may_not_open_fails_readiness_not_the_process(
    tmp_path: Path,
) -> None:
    """``/dev/kmsg`` in an unprivileged container: EPERM (the device cgroup refuses 1:11)."""
    def refused(start: position.Position | None) -> journal.Follower:
        raise PermissionError(1, "Operation not permitted")

    config = daemon.AgentConfig("gpu-node-b", tmp_path / "host", tmp_path / "state")
    agent = daemon.Agent(config, refused, no_checks)
    agent.follow_once()
    with metrics_http.serve(agent.exposition, agent.healthy, "127.0.0.1", 0,
                          ready=agent.ready) as server, httpx.Client() as client:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert client.get(f"{url}/healthz").status_code == 200
        assert client.get(f"{url}/readyz").status_code == 503
        metrics = client.get(f"{url}/metrics").text
    assert 'gpuguard_agent_kernel_log_readable{node="gpu-node-b"} 0.0' in metrics
    assert agent.kernel_log_problem == "cannot open the kernel log: Operation not permitted"


def test_the_journal_follower_names_a_host_without_journal_files(tmp_path: Path) -> None:
    follower = journal.JournalFollower(root=tmp_path)
    problem = follower.problem()
    assert problem is not None
    assert f"{tmp_path}/var/log/journal" in problem
    (tmp_path / "var/log/journal/3f2a").mkdir(parents=True)
    (tmp_path / "var/log/journal/3f2a/system.journal").write_bytes(b"LPKSHHRH")
    assert follower.problem() is None


def test_an_image_without_journalctl_is_named_not_a_crash(tmp_path: Path) -> None:
    def missing(argv: list[str]) -> journal.JournalProcess:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    follower = journal.JournalFollower(spawn=missing, root=tmp_path)
    assert follower.poll().lines == []
    assert follower.problem() == "cannot start journalctl: No such file or directory"


def test_the_pod_resources_opt_in_exports_which_pod_holds_each_gpu(
    tmp_path: Path, log: Path
) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as short:  # AF_UNIX paths: at most 107 bytes
        socket = Path(short) / "kubelet.sock"
        config = daemon.AgentConfig("gpu-node-b", tmp_path / "host", tmp_path / "state",
                                    pod_resources=socket)
        agent = daemon.Agent(config, lambda start: journal.FileFollower(log, start), no_checks)
        held = [("team-a", "train-0", "main", "nvidia.com/gpu", (UUID,))]
        with kubelet.PodResourcesServer(socket, lambda: kubelet.encode_list(held)):
            agent.check_once()
        pod = {"node": "gpu-node-b", "uuid": UUID, "namespace": "team-a", "pod": "train-0",
               "container": "main"}
        assert agent.registry.get_sample_value(names.GPU_POD, pod) == 1
        agent.check_once()  # the kubelet is gone: unknown, not "no pod"
        agent.follower.close()
    assert agent.registry.get_sample_value(names.GPU_POD, pod) is None
    readable = agent.registry.get_sample_value(names.POD_RESOURCES_READABLE,
                                               {"node": "gpu-node-b"})
    assert readable == 0
