"""``gpuguard ledger add|amend|remove`` refuse bad input before touching the cluster: exit 2
naming the flag, or one line saying what is wrong. (The commands against a live API are in
tests/integration/test_ledger_sim.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from gpuguard.cli.main import app

runner = CliRunner(env={"COLUMNS": "200"})


def _ledger(args: list[str], **kwargs: Any) -> Result:
    """``gpuguard ledger ARGS`` through the root command (its one-line errors and exit codes)."""
    return runner.invoke(app, ["ledger", *args], **kwargs)


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
        pytest.param({"node": "gpu node b"}, "--node", "not a Kubernetes name",
                     id="node-with-spaces"),
    ],
)
def test_add_refuses_bad_input_with_exit_2_naming_the_flag(
    overrides: dict[str, str], flag: str, says: str
) -> None:
    result = _ledger(add_args(**overrides))
    assert result.exit_code == 2, result.output
    assert flag in result.stderr
    assert says in result.stderr


def one_line_error(stderr: str) -> str:
    (line,) = stderr.strip().splitlines()
    assert line.startswith("error: ")
    return line


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        pytest.param({"xid": "13"}, "Xid 13 (Graphics Engine Exception) is a user-class Xid",
                     id="user-xid-13"),
        pytest.param({"xid": "31"}, "Xid 31 (GPU memory page fault) is a user-class Xid",
                     id="user-xid-31"),
        pytest.param({"at": "2999-01-01T00:00:00Z"}, "--at 2999-01-01T00:00:00Z is in the future",
                     id="future-time"),
        pytest.param({"at": "2999-01-01T00:00:00Z", "xid": "79"}, "in the future",
                     id="future-time-even-for-a-hardware-xid"),
    ],
)
def test_add_refuses_what_is_not_a_fault_of_the_card_in_one_line(
    overrides: dict[str, str], says: str
) -> None:
    result = _ledger(add_args(**overrides))
    assert result.exit_code == 2, result.output
    assert says in one_line_error(result.stderr)


def test_force_records_a_user_xid_but_never_a_future_time() -> None:
    forced = _ledger([*add_args(xid="13"), "--force"])
    assert forced.exit_code == 1  # past the checks: it went on to the (unreachable) cluster
    assert "listing ledger ConfigMaps" in forced.stderr
    future = _ledger([*add_args(at="2999-01-01T00:00:00Z"), "--force"])
    assert future.exit_code == 2
    assert "in the future" in future.stderr


def test_the_clusters_xid_overrides_decide_what_is_a_user_xid(tmp_path: Path) -> None:
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text("classes:\n  13: hardware\n  79: user\n")
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"controller:\n  xid_overrides: {overrides}\n")
    as_hardware = _ledger([*add_args(xid="13"), "--config", str(settings)])
    assert as_hardware.exit_code == 1  # accepted, then the cluster is unreachable
    as_user = _ledger([*add_args(xid="79"), "--config", str(settings)])
    assert as_user.exit_code == 2
    assert "Xid 79" in one_line_error(as_user.stderr)


def correction(command: str, *args: str) -> list[str]:
    return [command, *args, "--kube-server", UNREACHABLE]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(correction("remove", "--why", "wrong"), "choose the line with --id",
                     id="no-selection"),
        pytest.param(correction("remove", "--id", "3f2a9c01b7de", "--node", "gpu-node-b",
                                "--why", "wrong"), "not both", id="id-and-place"),
        pytest.param(correction("remove", "--node", "gpu-node-b", "--at",
                                "2026-09-10T13:03:59Z", "--why", "wrong"),
                     "--node, --at and --fault go together", id="place-without-fault"),
        pytest.param(correction("remove", "--node", "gpu-node-b", "--at",
                                "2026-09-10T13:03:59Z", "--fault", "xid79", "--why", "wrong"),
                     "--fault xid79: bad fault", id="bad-fault"),
        pytest.param(correction("remove", "--id", "3f2a9c01b7de", "--why", "  "),
                     "--why is empty", id="blank-why"),
        pytest.param(correction("remove", "--id", "3f2a9c01b7de", "--why", "x", "--by", ""),
                     "--by is empty", id="blank-who"),
        pytest.param(correction("amend", "--id", "3f2a9c01b7de", "--why", "wrong"),
                     "say what to correct", id="amend-without-a-change"),
    ],
)
def test_corrections_refuse_bad_input_in_one_line(args: list[str], says: str) -> None:
    result = _ledger(args)
    assert result.exit_code == 2, result.output
    assert says in one_line_error(result.stderr)


def test_a_correction_by_nobody_is_refused() -> None:
    result = _ledger(correction("remove", "--id", "3f2a9c01b7de", "--why", "x"),
                           env={"USER": ""})
    assert result.exit_code == 2
    assert "cannot tell who you are: say it with --by" in one_line_error(result.stderr)


def test_corrections_require_why() -> None:
    for command in ("remove", "amend"):
        result = _ledger(correction(command, "--id", "3f2a9c01b7de"))
        assert result.exit_code == 2
        assert "--why" in result.stderr


def test_help_teaches_with_examples() -> None:
    for command in ("list", "add", "export", "amend", "remove"):
        result = _ledger([command, "--help"])
        assert result.exit_code == 0
        assert "Example" in result.stdout


def test_unreachable_api_is_exit_1_with_the_error() -> None:
    result = _ledger(["list", "--kube-server", UNREACHABLE])
    assert result.exit_code == 1
    assert "error:" in result.stderr
    assert "listing ledger ConfigMaps" in result.stderr
