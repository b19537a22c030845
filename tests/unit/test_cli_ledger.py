"""``gpuguard ledger add`` refuses bad input before touching the cluster: exit 2 naming the
flag. (The commands against a live API are in tests/integration/test_ledger_sim.py.)"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuguard.cli import ledger

runner = CliRunner(env={"COLUMNS": "200"})
CARD = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
GOOD = {"--node": "gpu-node-b", "--xid": "79", "--pci": "0000:99:00.0", "--uuid": CARD,
        "--at": "2026-09-10T13:03:59Z"}
UNREACHABLE = "http://127.0.0.1:9"  # never contacted: validation comes first


def add_args(**overrides: str) -> list[str]:
    flags = {**GOOD, **{f"--{k}": v for k, v in overrides.items()}}
    return ["add", *[part for pair in flags.items() for part in pair], "--kube-server",
            UNREACHABLE]


@pytest.mark.parametrize(
    ("overrides", "flag", "says"),
    [
        pytest.param({"pci": "0000:99:zz.0"}, "--pci", "not a PCI address", id="pci-not-hex"),
        pytest.param({"uuid": "GPU-1a2b3c4d"}, "--uuid", "not a GPU UUID", id="truncated-uuid"),
        pytest.param({"uuid": "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"}, "--uuid", "not a GPU UUID",
                     id="uuid-without-gpu-prefix"),
        pytest.param({"at": "2026-09-10T13:03:59"}, "--at", "no timezone", id="time-without-zone"),
        pytest.param({"at": "yesterday"}, "--at", "not an ISO time", id="time-in-words"),
        pytest.param({"xid": "0"}, "--xid", "", id="xid-zero"),
        pytest.param({"verdict": "reboot"}, "--verdict", "", id="unknown-verdict"),
        pytest.param({"node": "gpu node b"}, "--node", "cannot be a ConfigMap key",
                     id="node-with-spaces"),
    ],
)
def test_add_refuses_bad_input_with_exit_2_naming_the_flag(
    overrides: dict[str, str], flag: str, says: str
) -> None:
    result = runner.invoke(ledger.app, add_args(**overrides))
    assert result.exit_code == 2, result.output
    assert flag in result.stderr
    assert says in result.stderr


def test_help_teaches_with_examples() -> None:
    for command in ("list", "add", "export"):
        result = runner.invoke(ledger.app, [command, "--help"])
        assert result.exit_code == 0
        assert "Example" in result.stdout


def test_unreachable_api_is_exit_1_with_the_error() -> None:
    result = runner.invoke(ledger.app, ["list", "--kube-server", UNREACHABLE])
    assert result.exit_code == 1
    assert "error:" in result.stderr
    assert "listing ledger ConfigMaps" in result.stderr
