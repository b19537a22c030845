"""The evidence Job's ``nvidia-smi -q`` row-remap verdict held to every real ``nvidia-smi -q``
output in ``tests/data/reference/nvidia_smi_samples.txt`` (verbatim, each with its source).

The judge is what the output itself says, read as NVIDIA's row-remapper documentation reads it
(https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/: ``Pending: Yes`` -> a reset is
needed to apply the remap; ``Remapping Failure Occurred: Yes`` -> the bank is out of spare
rows): FAIL exactly when a ``Remapped Rows`` section says Yes to either. The figure goes in
docs/xid-events.md; a sample the verdict disagrees with would be named there."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuguard.agent.evidence import smi
from gpuguard.model import decisions, ports

SAMPLES = Path(__file__).resolve().parents[1] / "data/reference/nvidia_smi_samples.txt"
_HEAD = re.compile(r"^>>> ===== SAMPLE (?P<n>\d+): (?P<what>.*)$")
FAIL, PASS = decisions.CheckStatus.FAIL, decisions.CheckStatus.PASS

# What each `nvidia-smi -q` sample says of its row remapper (read off the text, see above).
EXPECTED = {
    1: (PASS, "H100 590: Remapped Rows Pending No, Remapping Failure No"),
    6: (PASS, "H100 535: Pending No, Failure No"),
    7: (FAIL, "A10 535: Uncorrectable Error 4, Pending Yes (reset needed)"),
    8: (PASS, "A100 525: Pending No, Failure No"),
    9: (FAIL, "A100 510 after an Xid 63: Pending Yes"),
    10: (PASS, "pre-Ampere page retirement: no row remapper; the pending blacklist is not one"),
    11: (PASS, "SRAM uncorrectable counts (Xid 94): no Remapped Rows section"),
    14: (PASS, "-d PERFORMANCE: no Remapped Rows section"),
    15: (PASS, "clock throttle excerpt: no Remapped Rows section"),
    16: (PASS, "clocks excerpt: no Remapped Rows section"),
}


def samples() -> dict[int, tuple[str, str]]:
    """``nvidia-smi -q`` samples by number: (what the collector says, the verbatim output)."""
    out: dict[int, tuple[str, list[str]]] = {}
    current = None
    for line in SAMPLES.read_text(encoding="utf-8").splitlines():
        head = _HEAD.match(line)
        if head is not None:
            current = int(head["n"]) if "nvidia-smi -q" in head["what"] else None
            if current is not None:
                out[current] = (head["what"], [])
        elif current is not None and not line.startswith(">>>"):
            out[current][1].append(line)
    return {n: (what, "\n".join(body) + "\n") for n, (what, body) in out.items()}


class Answer:
    def __init__(self, stdout: str) -> None:
        self.stdout = stdout

    def run(self, argv: Sequence[str], *, timeout_s: float) -> ports.CommandResult:
        return ports.CommandResult(tuple(argv), 0, self.stdout, "")


def test_the_corpus_holds_the_ten_nvidia_smi_q_samples() -> None:
    assert sorted(samples()) == sorted(EXPECTED)


@pytest.mark.parametrize("number", sorted(EXPECTED), ids=lambda n: f"sample-{n}")
def test_the_row_remap_verdict_agrees_with_what_the_output_says(
    number: int, tmp_path: Path
) -> None:
    _, output = samples()[number]
    run, item = smi.query(tmp_path, smi.SmiOptions(), Answer(output), [])
    assert run.ran
    assert item.status is EXPECTED[number][0], (EXPECTED[number][1], item.evidence)
