"""Hypothesis profile for the property tests: enough examples to find a crash, few enough for
the whole suite's time budget; no deadline (a shared CI machine is slow at random)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "gpuguard", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("gpuguard")
