"""The circuit breaker on auto-isolation: a bad metric must not lock a fleet at once.

The cap is the smaller of an absolute count (seed: 5) and a fraction of GPU nodes (default
10 %), but never below one, so a small cluster can still isolate its first faulty node. The
breaker only limits *new* isolations; nodes already isolated are evaluated regardless.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuguard.model import settings as settings_model


@dataclass(frozen=True, slots=True)
class BreakerState:
    auto_isolated: int
    gpu_nodes: int
    cap: int

    @property
    def open(self) -> bool:
        return self.auto_isolated >= self.cap

    @property
    def room(self) -> int:
        """How many more nodes may be isolated before the breaker opens."""
        return max(0, self.cap - self.auto_isolated)

    def describe(self) -> str:
        state = "OPEN" if self.open else "closed"
        return (
            f"breaker {state}: {self.auto_isolated}/{self.cap} auto-isolated"
            f" ({self.gpu_nodes} GPU nodes)"
        )


def evaluate(
    auto_isolated: int, gpu_nodes: int, isolation: settings_model.IsolationSettings
) -> BreakerState:
    by_fraction = max(1, math.floor(isolation.breaker_max_fraction * gpu_nodes))
    cap = min(isolation.breaker_max_nodes, by_fraction)
    return BreakerState(auto_isolated=auto_isolated, gpu_nodes=gpu_nodes, cap=cap)
