"""swap: the kubelet expects none active."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.agent.checks import hostfs, swap
from gpuguard.model.decisions import CheckStatus
from tests.unit import hosttree
from tests.unit.hosttree import HostTree


def test_header_only_is_off(tmp_path: Path) -> None:
    hosttree.with_swaps(HostTree(tmp_path))
    assert swap.check(tmp_path).status is CheckStatus.PASS


def test_active_swap_fails_and_names_it(tmp_path: Path) -> None:
    hosttree.with_swaps(HostTree(tmp_path), "/swap.img")
    outcome = swap.check(tmp_path)
    assert outcome.status is CheckStatus.FAIL
    assert "/swap.img" in outcome.evidence
    assert outcome.fix is not None
    assert "swapoff -a" in outcome.fix


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(None, "not found", id="missing"),
        pytest.param("", "header", id="empty"),
        pytest.param("/swap.img file 1 0 -2\n", "header", id="no-header"),
        pytest.param(hosttree.SWAPS_HEADER + "/swap.img\n", "malformed", id="truncated-line"),
    ],
)
def test_unreadable_proc_swaps_is_an_error(tmp_path: Path, text: str | None, message: str) -> None:
    if text is not None:
        HostTree(tmp_path).write("proc/swaps", text)
    with pytest.raises(hostfs.HostReadError, match=message):
        swap.check(tmp_path)
