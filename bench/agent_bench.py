"""Benchmark: what the node agent costs the host it watches (seed 003: it must never hurt it).

Prints the CPU time of one conformance check cycle (``running.run_checks`` on a simulated
8-GPU host tree, with the real ``SubprocessRunner``; ``resource.getrusage`` of this process
and its children), the kernel-log lines per second the file follower counts (a synthetic
log, one Xid line per 1,000), the CPU the running agent uses while idle (the follower asleep
in its wait; checks every 5 s, then hourly: the follower alone), and the process's peak RSS.

    .venv/bin/python bench/agent_bench.py [--lines 2000000] [--cycles 20] [--idle 10]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import threading
import time
from pathlib import Path

from gpuguard.agent import commands, daemon, journal
from gpuguard.agent.checks import rke2_release, running, settings
from gpuguard.sim import hosts, kernel_lines, state

PCI = "0000:99:00.0"


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def host_tree(root: Path) -> Path:
    gpus = [
        state.SimGpu(index=i, uuid=state.new_uuid(f"bench/{i}"), pci=f"0000:{0x18 + i:02x}:00.0",
                     model="NVIDIA H100 80GB HBM3")
        for i in range(8)
    ]
    node = state.SimNode(name="bench-node", boot_id="b", driver_module="580.126.09",
                         driver_library="580.126.09", gpus=gpus)
    return hosts.write_host_tree(node, root)


def check_settings() -> settings.CheckSettings:
    return settings.CheckSettings(control_plane_version=rke2_release.parse("v1.31.4+rke2r1"))


def bench_checks(tree: Path, cycles: int) -> None:
    runner = commands.SubprocessRunner()
    running.run_checks(tree, check_settings(), runner)  # warm imports and caches
    cpu, wall = cpu_seconds(), time.perf_counter()
    for _ in range(cycles):
        running.run_checks(tree, check_settings(), runner)
    cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
    print(f"check cycle: {cpu / cycles * 1000:.1f} ms CPU, {wall / cycles * 1000:.1f} ms wall "
          f"(mean of {cycles}; 10 checks, 8 GPUs)")


def synthetic_log(path: Path, lines: int) -> None:
    noise = "Nov 29 10:00:00 host kernel: [ 1234.567890] eth0: link up, 100Gbps, full duplex\n"
    xid = f"Nov 29 10:00:00 host kernel: [ 1234.567890] {kernel_lines.xid(PCI, 79)}\n"
    block = noise * 999 + xid
    with path.open("w") as f:
        for _ in range(lines // 1000):
            f.write(block)


def bench_follow(tmp: Path, tree: Path, lines: int) -> None:
    log = tmp / "kern.log"
    synthetic_log(log, lines)
    agent = daemon.Agent(
        daemon.AgentConfig("bench-node", tree, tmp / "state-follow"),
        lambda start: journal.FileFollower(log, start), list,
    )
    cpu, wall = cpu_seconds(), time.perf_counter()
    while agent.follow_once():
        pass
    cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
    agent.follower.close()
    xids = sum(agent.tally.xids.values())
    print(f"follow: {agent.tally.lines:,} lines ({log.stat().st_size / 1e6:.0f} MB), {xids:,} Xids "
          f"in {wall:.2f} s = {agent.tally.lines / wall:,.0f} lines/s ({cpu:.2f} s CPU, "
          f"state saved after each 1 MiB batch)")


def bench_idle(tmp: Path, tree: Path, seconds: float, check_interval_s: float = 5.0) -> None:
    """The CPU of the whole agent over ``seconds`` with nothing written to its kernel log: the
    follower asleep in its wait (journal.Waiter), the checks every ``check_interval_s``."""
    log = tmp / "idle.log"
    log.write_text("")
    state = tmp / f"state-idle-{check_interval_s:g}"
    config = daemon.AgentConfig("bench-node", tree, state, check_interval_s=check_interval_s)
    runner = commands.SubprocessRunner()
    agent = daemon.Agent(config, lambda start: journal.FileFollower(log, start),
                         lambda: running.run_checks(tree, check_settings(), runner))
    stop = threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,))
    loop.start()
    time.sleep(1.0)  # past the first check cycle, which every interval starts with
    cpu, wall = cpu_seconds(), time.perf_counter()
    time.sleep(seconds)
    cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
    stop.set()
    loop.join()
    print(f"running agent, idle log, checks every {check_interval_s:g} s: "
          f"{cpu / wall * 100:.3f} % of one core over {wall:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as name:
        tmp = Path(name)
        tree = host_tree(tmp / "hosts")
        bench_checks(tree, args.cycles)
        bench_follow(tmp, tree, args.lines)
        bench_idle(tmp, tree, args.idle)
        bench_idle(tmp, tree, args.idle, check_interval_s=3600.0)  # the follower alone
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process (agent + bench): {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
