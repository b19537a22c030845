"""A step that raises fails closed, names what it was working on, and a bad input that stays
is logged at ERROR once, not every tick."""

from __future__ import annotations

import logging

import pytest

from gpuguard.controller import failsafe


def test_a_failure_returns_the_default_names_its_subject_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors: failsafe.StepErrors = []

    def explode() -> int:
        raise ValueError("invalid literal for int() with base 10: '²'")

    with caplog.at_level(logging.DEBUG, logger="gpuguard.controller.failsafe"):
        first = failsafe.guarded("recovery", "node gpu-node-q (xid-²)", errors, explode, -1)
        again = failsafe.guarded("recovery", "node gpu-node-q (xid-²)", errors, explode, -1)
    assert (first, again) == (-1, -1)
    assert errors == [("recovery", "node gpu-node-q (xid-²): ValueError: invalid literal for "
                                   "int() with base 10: '²'")] * 2  # fmt: skip
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.DEBUG]
    assert failsafe.guarded("recovery", "node ok", errors, lambda: 7, -1) == 7
