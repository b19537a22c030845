"""Flag and argument parsers that keep every duration and number a person types within
bounds (``model.bounds``), so a bad value is refused before the command starts: exit 2 and
``Invalid value for '--step': ...`` naming the flag.

Use as ``typer.Option(parser=inputs.duration(), metavar=inputs.DURATION)`` or
``typer.Argument(parser=inputs.node_name)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

import typer

from gpuguard.errors import InputError
from gpuguard.model import bounds

T = TypeVar("T")
V = TypeVar("V")
DURATION = "DURATION"  # the metavar of a duration flag in --help: 90s, 10m, 1h30m

REPLAY_RANGE = timedelta(days=90)  # the longest history one backtest replays
REPLAY_INSTANTS = 200_000  # 90 days at a 1-minute step is 129,600


def _flag(check: Callable[[V], T]) -> Callable[[V], T]:
    """``check`` as a parser: its InputError becomes click's "Invalid value for FLAG"."""

    def parse(value: V) -> T:
        try:
            return check(value)
        except InputError as e:
            raise typer.BadParameter(str(e)) from e

    return parse


node_name = _flag(bounds.object_name)
namespace = _flag(bounds.namespace)
url = _flag(bounds.http_url)


def duration(
    shortest: timedelta = timedelta(0), longest: timedelta = bounds.LONGEST
) -> Callable[[str | timedelta], timedelta]:
    """A parser of durations with a unit, longer than 0s, at least ``shortest``, at most
    ``longest``."""

    def parse(text: str | timedelta) -> timedelta:
        if isinstance(text, timedelta):
            return text
        return bounds.duration(text, shortest=shortest, longest=longest)

    return _flag(parse)


def number(lowest: float, highest: float) -> Callable[[str | float], float]:
    """A parser of finite numbers from ``lowest`` to ``highest`` (no ``inf``, no ``nan``)."""

    def parse(text: str | float) -> float:
        try:
            value = float(text)
        except ValueError as e:
            raise InputError(f"{text!r}: expected a number") from e
        if not math.isfinite(value) or not lowest <= value <= highest:
            raise InputError(f"{text!r}: expected a number from {lowest:g} to {highest:g}")
        return value

    return _flag(parse)
