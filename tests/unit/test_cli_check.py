"""``gpuguard check``: exit codes, JSON shape, flag validation and --fix on fixture hosts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app
from tests.unit.hosttree import HostTree

HOSTS = Path(__file__).resolve().parents[1] / "data" / "hosts"
HEALTHY = HOSTS / "healthy-worker"
INCIDENT = HOSTS / "autoupdate-incident"
CONTROL_PLANE = ["--control-plane-version", "v1.31.4+rke2r1"]


def gpuguard(*args: str | Path) -> tuple[int, str]:
    outcome = CliRunner(env={"COLUMNS": "120"}).invoke(app, ["check", *map(str, args)])
    return outcome.exit_code, outcome.output


def statuses(output: str) -> dict[str, str]:
    return {row["check"]: row["status"] for row in json.loads(output)}


def test_healthy_worker_exits_0_with_a_summary_line() -> None:
    code, output = gpuguard("--root", HEALTHY, *CONTROL_PLANE)
    assert code == 0
    assert "10 checks: 10 PASS (exit 0)" in output


def test_seed_autoupdate_incident_exits_1_naming_each_cause() -> None:
    code, output = gpuguard("--root", INCIDENT, *CONTROL_PLANE, "-o", "json")
    assert code == 1
    assert {k: v for k, v in statuses(output).items() if v != "PASS"} == {
        "ipvs-persist": "FAIL",
        "nvidia-match": "FAIL",
        "auto-upgrade": "WARN",
        "package-pin": "FAIL",
    }


def test_unknown_without_fail_exits_2() -> None:
    code, output = gpuguard("--root", HEALTHY, "-o", "json")
    assert code == 2
    assert statuses(output)["rke2-version"] == "UNKNOWN"


def test_json_is_a_list_of_check_status_evidence_fix() -> None:
    _, output = gpuguard("--root", INCIDENT, *CONTROL_PLANE, "--output", "json")
    rows = json.loads(output)
    assert all(set(row) == {"check", "status", "evidence", "fix"} for row in rows)
    assert all(isinstance(row["evidence"], str) and row["evidence"] for row in rows)
    assert {row["status"] for row in rows} <= {"PASS", "WARN", "FAIL", "UNKNOWN", "FIXED"}
    assert all(str(HOSTS) not in row["evidence"] for row in rows)


def test_empty_root_is_never_all_pass(tmp_path: Path) -> None:
    code, output = gpuguard("--root", tmp_path, "-o", "json")
    assert code in (1, 2)
    assert "PASS" not in statuses(output).values()


def test_a_run_writes_nothing_to_the_host(tmp_path: Path) -> None:
    shutil.copytree(INCIDENT, tmp_path / "host")
    tree = HostTree(tmp_path / "host")
    before = tree.snapshot()
    gpuguard("--root", tree.root, *CONTROL_PLANE)
    assert tree.snapshot() == before


def test_fix_creates_only_the_ipvs_file_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    shutil.copytree(INCIDENT, tmp_path / "host")
    tree = HostTree(tmp_path / "host")
    before = tree.snapshot()

    code, output = gpuguard("--root", tree.root, *CONTROL_PLANE, "--fix", "-o", "json")
    after = tree.snapshot()
    code_again, output_again = gpuguard("--root", tree.root, *CONTROL_PLANE, "--fix", "-o", "json")

    assert set(after) - set(before) == {"etc/modules-load.d/ipvs.conf"}
    assert {k: after[k] for k in before} == before
    assert statuses(output)["ipvs-persist"] == "FIXED"
    assert code == code_again == 1  # the driver mismatch and unpinned packages remain
    assert statuses(output_again)["ipvs-persist"] == "PASS"
    assert tree.snapshot() == after


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        pytest.param(["--allowed-dns", "10.0.0.0/33"], "--allowed-dns", id="bad-cidr"),
        pytest.param(["--allowed-dns", "10.0.0.0/8,corp-dns"], "--allowed-dns", id="bad-entry"),
        pytest.param(["--control-plane-version", "1.31"], "--control-plane-version", id="bad-ver"),
        pytest.param(["--role", "gpu"], "--role", id="bad-role"),
        pytest.param(["-o", "xml"], "--output", id="bad-output"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(flags: list[str], named: str) -> None:
    code, output = gpuguard("--root", HEALTHY, *flags)
    assert code == 2
    assert named in output


def test_allowed_dns_flag_narrows_the_resolvers() -> None:
    code, output = gpuguard(
        "--root", HEALTHY, *CONTROL_PLANE, "--allowed-dns", "192.168.0.0/16", "-o", "json"
    )
    assert code == 1
    assert statuses(output)["dns-upstream"] == "FAIL"


def test_server_role_expects_rke2_server() -> None:
    _, output = gpuguard("--root", HEALTHY, *CONTROL_PLANE, "--role", "server", "-o", "json")
    assert statuses(output)["rke2-unit"] == "FAIL"


def test_help_teaches_checks_exit_codes_and_an_example() -> None:
    code, output = gpuguard("--help")
    assert code == 0
    for text in (
        "ipvs-resolvable",
        "package-pin",
        "Exit codes",
        "--control-plane-version",
        "v1.31.4+rke2r1",
        "--allowed-dns 10.0.0.0/8",
        "never runs nvidia-smi",
    ):
        assert text in output


def test_table_shows_evidence_verbatim_even_with_brackets(tmp_path: Path) -> None:
    HostTree(tmp_path).write("etc/resolv.conf", "nameserver [::1]\n")
    _, output = gpuguard("--root", tmp_path)
    assert "non-global nameserver [::1]" in output
