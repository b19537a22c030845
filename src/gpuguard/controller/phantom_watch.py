"""Phantom utilization in the guard's loop: find GPUs busy with nothing every few ticks,
report them (findings, ``gpuguard_phantom_gpu`` = wasted watts) and, only when the operator
opted in (``phantom.cordon``), cordon their node — admitted by the isolation policy after the
faults, through the same breaker and per-tick limit, and never a node a human cordoned.

A bad Prometheus answer means no phantom findings this time, never a cordon. The agent's
per-GPU process counts (``gpuguard_gpu_processes``) go to the policy with the windows: a GPU
with a process is never phantom; without an agent the pod join alone decides.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from gpuguard.catalog import gpu_models
from gpuguard.errors import SourceError
from gpuguard.model import settings as settings_model
from gpuguard.policy import phantom
from gpuguard.sources import gpu_metrics

log = logging.getLogger(__name__)


class WindowSource(Protocol):
    def readings(self, at: datetime) -> gpu_metrics.GpuReadings: ...


@dataclass
class PhantomWatch:
    source: WindowSource
    settings: settings_model.PhantomSettings
    models: gpu_models.GpuModelTable = field(default_factory=gpu_models.load_table)
    every: timedelta = timedelta(minutes=1)
    _last: datetime | None = None
    last: phantom.PhantomDecision | None = None

    def run(self, at: datetime) -> phantom.PhantomDecision | None:
        """A fresh decision when one is due, else None (the previous one still stands)."""
        if self._last is not None and at - self._last < self.every:
            return None
        self._last = at
        try:
            read = self.source.readings(at)
        except SourceError as e:
            log.warning("phantom check skipped: %s", e)
            self.last = phantom.PhantomDecision(phantoms=())
            return self.last
        self.last = phantom.decide(read.windows, self.settings, self.models, at, read.processes)
        return self.last
