"""A simulated world from a scenario's YAML text, stepped to an instant: what the simulator's
unit tests start from."""

from __future__ import annotations

from datetime import timedelta

from gpuguard.sim import clock, scenario, store, world


def stepped(text: str, until: timedelta) -> world.World:
    """The world of scenario ``text`` on an empty object store, played up to ``until``."""
    spec = scenario.loads(text)
    played = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))
    played.step_to(until)
    return played
