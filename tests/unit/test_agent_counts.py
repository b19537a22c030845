"""The agent's typed counts: what survives a restart, and what counts as "this boot"."""

from __future__ import annotations

import pytest

from gpuguard.agent.counts import CardKey, Counts, SxidKey, XidKey

PCI, UUID = "0000:01:00.0", "GPU-1"


def test_codes_are_numbers_in_the_agent_and_text_in_the_saved_shape() -> None:
    counts = Counts(xids={XidKey("4", UUID, PCI, 79, ""): 2},
                    sxids={SxidKey("0000:a0:00.0", 20034, "Fatal"): 1})
    saved = counts.as_json()
    assert saved["xids"] == [["4", UUID, PCI, "79", "", 2]]  # the shape agents saved before
    assert saved["sxids"] == [["0000:a0:00.0", "20034", "Fatal", 1]]
    assert Counts.from_json(saved) == counts


def test_rows_saved_before_the_rule_label_read_with_no_rule() -> None:
    read = Counts.from_json({"xids": [["4", UUID, PCI, "48", 3]]})
    assert read.xids == {XidKey("4", UUID, PCI, 48, ""): 3}


@pytest.mark.parametrize("saved", [
    {"xids": [["4", UUID, PCI, "seventy-nine", "", 1]]},
    {"fallen_off": [[PCI, 1]]},
    {"lines": "many"},
])
def test_a_bad_saved_shape_is_refused(saved: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        Counts.from_json(saved)


def test_this_boot_is_the_rows_that_grew_since_its_start() -> None:
    old, new = XidKey("4", UUID, PCI, 79, ""), XidKey("2", "GPU-2", "0000:2a:00.0", 13, "")
    start = Counts(xids={old: 1}, fallen_off={CardKey(PCI, UUID): 1}, lines=100)
    now = Counts(xids={old: 1, new: 5}, fallen_off={CardKey(PCI, UUID): 2}, lines=150)
    grown = now.since(start)
    assert grown.xids == {new: 5}  # the Xid 79 of an earlier boot is not this boot's
    assert grown.fallen_off == {CardKey(PCI, UUID): 2}
    assert grown.lines == 50
