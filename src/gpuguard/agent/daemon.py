"""The node agent's loop: follow the kernel log, count Xids, run the conformance checks.

Two threads and nothing that can hang on the GPU driver (the incident library,
docs/design.md#incidents: a monitoring script locked the GPUs it watched). The follower thread
polls the kernel log (non-blocking reads, or a journalctl child) every ``poll_interval_s``,
counts the new lines into the ``Tally``, and only then saves the position with the counts
(``agent.position``). The check thread runs ``running.run_checks`` (each check under a hard
timeout, UNKNOWN on any error, no NVML, no nvidia-smi) and then the bounded ``/proc`` scan for
the processes on each GPU (``agent.gpu_processes``) every ``check_interval_s``. The HTTP server
(``gpuguard.metrics_http``) renders both on each scrape; ``healthy()`` turns false when either
thread stops making progress. ``ready()`` is also false while the kernel log cannot be read:
an agent that cannot read its source says so in one log line and in
``gpuguard_agent_kernel_log_readable 0``, and is never a healthy-looking blind agent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry

from gpuguard.agent import exporter, gpu_processes, journal, position
from gpuguard.agent import topology as agent_topology
from gpuguard.agent.checks import result
from gpuguard.kernlog import parse

log = logging.getLogger(__name__)

FollowerFactory = Callable[[position.Position | None], journal.Follower]
CheckRun = Callable[[], list[result.CheckResult]]
STALE_POLLS = 30  # the follower counts as stuck after this many poll intervals without a poll
ERROR_BACKOFF_S = 5.0


@dataclass(frozen=True, slots=True)
class AgentConfig:
    node: str
    root: Path
    state_dir: Path
    check_interval_s: float = 300.0
    poll_interval_s: float = 1.0
    process_scan_budget_s: float = gpu_processes.BUDGET_S


class Agent:
    """One node's agent. ``run(stop)`` blocks until ``stop`` is set; the rest is for tests."""

    def __init__(
        self,
        config: AgentConfig,
        follower_factory: FollowerFactory,
        run_checks: CheckRun,
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        topology: agent_topology.TopologyProbe | None = None,
    ) -> None:
        self.config = config
        saved = position.load(config.state_dir)
        self.tally = exporter.Tally(exporter.read_gpu_indexes(config.root))
        self.cards = gpu_processes.read_cards(config.root)
        self.tally.restore(saved.counts)
        self._saved_position = saved.position
        self.follower = _open_follower(follower_factory, saved.position)
        self.kernel_log_problem: str | None = None
        self.parser = parse.XidLogParser()
        self.collector = exporter.AgentCollector(config.node, self.tally)
        self.topology = self.collector.topology = topology
        self._bus_losses_at_start = _bus_losses(self.tally)
        self.registry: CollectorRegistry = exporter.registry_for(self.collector)
        self._run_checks = run_checks
        self._wall = wall
        self._monotonic = monotonic
        self._last_poll = monotonic()
        self._last_check_start: float | None = None

    # ---- one step each (tests drive these directly) -------------------------------------------

    def follow_once(self) -> int:
        """Read what arrived, count it, then save the position; the number of lines read."""
        batch = self.follower.poll()
        self._last_poll = self._monotonic()
        self._note_problem(None if batch.lines else self.follower.problem())
        if not batch.lines and not batch.unreadable and batch.position == self._saved_position:
            return 0
        self.tally.count(batch.lines, self.parser, batch.unreadable)
        position.save(self.config.state_dir, position.Saved(batch.position, self.tally.as_json()))
        self._saved_position = batch.position
        return len(batch.lines)

    def _note_problem(self, problem: str | None) -> None:
        """Say once when the kernel log becomes unreadable, and once when it is read again."""
        if problem != self.kernel_log_problem:
            if problem is not None:
                log.warning("kernel log unreadable: %s", problem)
            else:
                log.info("kernel log readable again")
        self.kernel_log_problem = problem
        self.collector.kernel_log_readable = problem is None

    def check_once(self) -> exporter.CheckCycle:
        self._last_check_start = started = self._monotonic()
        results = self._run_checks()
        self.collector.processes = self.scan_processes()
        if self.topology is not None:
            self.topology.run(datetime.fromtimestamp(self._wall(), UTC), self._hung_signs())
        cycle = exporter.CheckCycle(tuple(results), self._wall(), self._monotonic() - started)
        self.collector.cycle = cycle
        return cycle

    def _hung_signs(self) -> list[str]:
        """A GPU fell off the bus (Xid 79 or the kernel's message) since this agent started —
        with the node, usually: nvidia-smi would hang on that driver (docs/design.md#invariants)."""
        lost = _bus_losses(self.tally) - self._bus_losses_at_start
        if lost <= 0:
            return []
        return [f"{lost} GPU off-the-bus event(s) in the kernel log since the agent started"]

    def scan_processes(self) -> gpu_processes.ProcessReport:
        found = gpu_processes.scan(
            self.config.root, budget_s=self.config.process_scan_budget_s, monotonic=self._monotonic
        )
        if found.incomplete:
            log.warning("GPU process scan incomplete after %d fds: %s", found.fds, found.incomplete)
        return gpu_processes.report(found, self.cards)

    def exposition(self) -> bytes:
        return exporter.exposition(self.registry)

    def healthy(self) -> bool:
        now = self._monotonic()
        following = now - self._last_poll < STALE_POLLS * self.config.poll_interval_s + 5
        started = self._last_check_start
        checking = started is None or now - started < 2 * self.config.check_interval_s + 60
        return following and checking

    def ready(self) -> bool:
        """Healthy and reading its kernel log (the DaemonSet's readiness probe)."""
        return self.healthy() and self.kernel_log_problem is None

    # ---- the loop -----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        threads = [
            threading.Thread(target=self._follow, args=(stop,), name="agent-follow", daemon=True),
            threading.Thread(target=self._check, args=(stop,), name="agent-check", daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            stop.wait()
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
            self.follower.close()

    def _follow(self, stop: threading.Event) -> None:
        delay = 0.0
        while not stop.wait(delay):
            try:
                busy = self.follow_once() > 0
                delay = 0.0 if busy else self.config.poll_interval_s
            except Exception:  # keep following; healthz shows a follower that never recovers
                log.exception("kernel log follower failed; retrying in %ss", ERROR_BACKOFF_S)
                delay = ERROR_BACKOFF_S

    def _check(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.check_once()
            except Exception:
                log.exception("check cycle failed")
            stop.wait(self.config.check_interval_s)


def _bus_losses(tally: exporter.Tally) -> int:
    """Xid 79 lines and "fallen off the bus" messages counted so far."""
    snapshot = tally.as_json()
    xid79 = sum(int(n) for *_, code, n in snapshot["xids"] if str(code) == "79")
    return xid79 + sum(int(n) for *_, n in snapshot["fallen_off"])


def _open_follower(
    factory: FollowerFactory, start: position.Position | None
) -> journal.Follower:
    """The follower, or one that says why its source could not be opened (never a crash)."""
    try:
        return factory(start)
    except OSError as e:
        return journal.Unreadable(f"cannot open the kernel log: {e.strerror or e}")
