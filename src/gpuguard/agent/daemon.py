"""The node agent's loop: follow the kernel log, count Xids, run the conformance checks.

Two threads and nothing that can hang on the GPU driver (the incident library,
docs/design.md#incidents: a monitoring script locked the GPUs it watched). The follower thread
sleeps until the kernel log has news (``journal``: inotify on a file's directory, poll(2) on
``/dev/kmsg``, journalctl's output) or ``poll_interval_s`` passed, reads it non-blocking,
counts the new lines into the ``Tally``, and only then saves the position with the counts
(``agent.position``). The check thread runs ``running.run_checks`` (each check under a hard
timeout, UNKNOWN on any error, no NVML, no nvidia-smi) and then the bounded ``/proc`` scan for
the processes on each GPU (``agent.gpu_processes``) every ``check_interval_s``. The HTTP server
(``gpuguard.metrics_http``) renders both on each scrape; ``healthy()`` turns false when either
thread stops making progress. ``ready()`` is also false while the kernel log cannot be read:
an agent that cannot read its source says so in one log line and in
``gpuguard_agent_kernel_log_readable 0``, and is never a healthy-looking blind agent.

With a ``reporter`` (``gpuguard agent`` by default) the agent also reports what it sees as
node conditions (``agent.conditions``, docs/design.md#fast-path): the follower thread offers
them right after counting new lines — a GPU off the bus is on the Node within a poll — and the
check thread after each cycle; ``agent.node_status`` writes them, rate-limited. "This boot" is
counted from the counts saved with the boot ID at this boot's first start (``boot-baseline.json``).
Which Xids are hardware is the packaged catalog with the cluster's class override file
(``AgentConfig.xid_overrides``, the file of the controller's ``controller.xid_overrides``),
read once at start as the controller reads it, so both classify alike: a changed file counts
from the next start (the Helm chart restarts both on a change, docs/security.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry

from gpuguard.agent import (
    conditions,
    exporter,
    gpu_processes,
    journal,
    node_status,
    podresources,
    position,
)
from gpuguard.agent import counts as agent_counts
from gpuguard.agent import topology as agent_topology
from gpuguard.agent.checks import gpu_state, nvidia, result
from gpuguard.agent.evidence import hostread, pci
from gpuguard.catalog import xid as xid_catalog
from gpuguard.errors import SourceError
from gpuguard.kernlog import parse
from gpuguard.model import decisions, faults
from gpuguard.model import node_conditions as nc
from gpuguard.policy import xid_signals

log = logging.getLogger(__name__)

FollowerFactory = Callable[[position.Position | None], journal.Follower]
CheckRun = Callable[[], list[result.CheckResult]]
STALE_POLLS = 30  # the follower counts as stuck after this many poll intervals without a poll
ERROR_BACKOFF_S = 5.0
POLL_INTERVAL_S = 1.0  # the follower reads the kernel log at least this often (at once on news)
CHECK_INTERVAL_S = 300.0  # the check thread runs the checks this often (the CLI's default)
_STATES = frozenset({nvidia.NAME, gpu_state.RECOVERY, gpu_state.FABRIC})


@dataclass(frozen=True, slots=True)
class AgentConfig:
    node: str
    root: Path
    state_dir: Path
    check_interval_s: float = CHECK_INTERVAL_S
    poll_interval_s: float = POLL_INTERVAL_S
    process_scan_budget_s: float = gpu_processes.BUDGET_S
    pod_resources: Path | None = None  # the kubelet's PodResources socket (opt-in)
    xid_overrides: Path | None = None  # the cluster's Xid class override file (the controller's)


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
        reporter: node_status.ConditionReporter | None = None,
        classifier: xid_signals.XidClassifier | None = None,
    ) -> None:
        self.config = config
        self._classifier = classifier or _classes(config.xid_overrides)
        saved = position.load(config.state_dir)
        self.tally = exporter.Tally(exporter.read_gpu_indexes(config.root),
                                    driver_major=exporter.read_driver_major(config.root))
        self.cards = gpu_processes.read_cards(config.root)
        self.tally.restore(saved.counts)
        self._saved_position = saved.position
        self.follower = _open_follower(follower_factory, saved.position)
        self.kernel_log_problem: str | None = None
        self.parser = parse.XidLogParser()
        self.collector = exporter.AgentCollector(config.node, self.tally)
        self.collector.classes = self._classifier
        self.pods = (
            None if config.pod_resources is None
            else podresources.KubeletPodResources(config.pod_resources)
        )
        self.topology = self.collector.topology = topology
        self._bus_losses_at_start = _bus_losses(self.tally)
        self.registry: CollectorRegistry = exporter.registry_for(self.collector)
        self._run_checks = run_checks
        self._wall = wall
        self._monotonic = monotonic
        self._last_poll = monotonic()
        self._last_check_start: float | None = None
        self.reporter = self.collector.reporter = reporter
        self._boot_baseline = _boot_baseline(config, self.tally)
        self._states: dict[str, tuple[decisions.CheckStatus, str]] = {}
        """The last status and evidence of the checks the conditions read, by check."""
        self.conditions: dict[str, nc.GpuCondition] = {}

    # ---- one step each (tests drive these directly) -------------------------------------------

    def follow_once(self) -> int:
        """Read what arrived, count it, then save the position; the number of lines read."""
        batch = self.follower.poll()
        self._last_poll = self._monotonic()
        problem_changed = self._note_problem(None if batch.lines else self.follower.problem())
        if not batch.lines and not batch.unreadable and batch.position == self._saved_position:
            self._follow_conditions(problem_changed)
            return 0
        self.tally.count(batch.lines, self.parser, batch.unreadable)
        position.save(self.config.state_dir, position.Saved(batch.position, self.tally.as_json()))
        self._saved_position = batch.position
        self._follow_conditions(True)
        return len(batch.lines)

    def _follow_conditions(self, news: bool) -> None:
        """The follower's part of reporting: at once after new lines (the fast path,
        docs/design.md#fast-path), again each poll while a card the kernel said fell off the
        bus still answers (its config space may turn to all ones), else only what is due."""
        if self.reporter is None:
            return
        fallen = self.conditions.get(nc.GPU_FALLEN_OFF_BUS)
        if news or (fallen is not None and fallen.reason == conditions.FELL_OFF_ANSWERS):
            self.report_conditions()
        else:
            self.reporter.flush()

    def report_conditions(self) -> dict[str, nc.GpuCondition]:
        """Compute the node conditions from what the agent knows now and offer them to the
        reporter (which writes them when they changed, rate-limited)."""
        counts = self.tally.counts()
        seen = conditions.Seen(
            counts=counts,
            baseline=self._boot_baseline,
            gpu_index=self.tally.gpu_index,
            config_all_ff=self._config_space(counts),
            kernel_log_problem=self.kernel_log_problem,
            driver=self._states.get(nvidia.NAME),
            uuid_by_pci=counts.uuid_by_pci,
            recovery=self._states.get(gpu_state.RECOVERY),
            fabric=self._states.get(gpu_state.FABRIC),
        )
        now = datetime.fromtimestamp(self._wall(), UTC)
        self.conditions = conditions.compute(seen, self._classifier, now)
        if self.reporter is not None:
            self.reporter.offer(self.conditions)
        return self.conditions

    def _config_space(self, counts: agent_counts.Counts) -> dict[str, bool | None]:
        """Whether each card the kernel said fell off the bus reads all ones now."""
        cards = {key.pci for key in counts.xids if key.xid == faults.FALLEN_OFF_BUS_XID}
        cards |= {key.pci for key in counts.fallen_off}
        return {c: pci.config_space_all_ff(self.config.root, c) for c in cards if c}

    def _note_problem(self, problem: str | None) -> bool:
        """Say once when the kernel log becomes unreadable, and once when it is read again;
        whether it changed."""
        changed = problem != self.kernel_log_problem
        if changed:
            if problem is not None:
                log.warning("kernel log unreadable: %s", problem)
            else:
                log.info("kernel log readable again")
        self.kernel_log_problem = problem
        self.collector.kernel_log_readable = problem is None
        return changed

    def check_once(self) -> exporter.CheckCycle:
        self._last_check_start = started = self._monotonic()
        results = self._run_checks()
        self.collector.processes = self.scan_processes()
        if self.pods is not None:
            self.collector.pod_devices = self.read_pods(self.pods)
        if self.topology is not None:
            self.topology.run(datetime.fromtimestamp(self._wall(), UTC), self._hung_signs())
        cycle = exporter.CheckCycle(tuple(results), self._wall(), self._monotonic() - started)
        self.collector.cycle = cycle
        self._states = {r.check: (r.status, r.evidence) for r in results if r.check in _STATES}
        if self.reporter is not None:
            self.report_conditions()
        return cycle

    def read_pods(self, pods: podresources.KubeletPodResources) -> exporter.PodDevices:
        """Which pods hold which GPUs; unreadable says so (``readable`` 0), never "none"."""
        try:
            return exporter.PodDevices(True, pods.list())
        except SourceError as e:
            log.warning("pods on GPUs unknown: %s", e)
            return exporter.PodDevices(False, ())
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
            self.follower.wake()  # the follower thread may be asleep in its wait
            for thread in threads:
                thread.join(timeout=30)
            self.follower.close()

    def _follow(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                if self.follow_once() == 0:  # caught up: sleep until the source has news
                    self.follower.wait(self.config.poll_interval_s)
            except Exception:  # keep following; healthz shows a follower that never recovers
                log.exception("kernel log follower failed; retrying in %ss", ERROR_BACKOFF_S)
                stop.wait(ERROR_BACKOFF_S)

    def _check(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.check_once()
            except Exception:
                log.exception("check cycle failed")
            stop.wait(self.config.check_interval_s)


def _classes(overrides: Path | None) -> xid_catalog.XidCatalog:
    """The packaged catalog with the cluster's override file, loaded as the controller loads it
    (read once, at start: a bad file stops the agent with a CatalogError naming it)."""
    catalog = xid_catalog.load_catalog(overrides)
    if overrides is not None:
        log.info("Xid classes: the packaged catalog with the overrides of %s", overrides)
    return catalog


BASELINE_FILE = "boot-baseline.json"


def _boot_baseline(config: AgentConfig, tally: exporter.Tally) -> agent_counts.Counts:
    """The counts at this boot's start, which the conditions subtract ("seen this boot"):
    kept in the state directory with the boot ID, taken afresh when the boot ID changed."""
    boot = hostread.optional_line(config.root, "proc/sys/kernel/random/boot_id") or ""
    path = config.state_dir / BASELINE_FILE
    try:
        saved = json.loads(path.read_text())
        if saved.get("boot_id") == boot and isinstance(saved.get("counts"), dict):
            return agent_counts.Counts.from_json(saved["counts"])
    except (OSError, ValueError, TypeError, AttributeError):
        pass  # none yet (or unreadable): this boot starts from the restored counts
    counts = tally.counts()
    data = json.dumps({"boot_id": boot, "counts": counts.as_json()}).encode()
    try:
        position.write_file(config.state_dir, BASELINE_FILE, data)
    except OSError as e:
        log.warning("%s not saved: %s", BASELINE_FILE, e)
    return counts


def _bus_losses(tally: exporter.Tally) -> int:
    """Xid 79 lines and "fallen off the bus" messages counted so far."""
    counts = tally.counts()
    xid79 = sum(n for key, n in counts.xids.items() if key.xid == faults.FALLEN_OFF_BUS_XID)
    return xid79 + sum(counts.fallen_off.values())


def _open_follower(
    factory: FollowerFactory, start: position.Position | None
) -> journal.Follower:
    """The follower, or one that says why its source could not be opened (never a crash)."""
    try:
        return factory(start)
    except OSError as e:
        return journal.Unreadable(f"cannot open the kernel log: {e.strerror or e}")
