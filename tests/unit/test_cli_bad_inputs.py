"""Every command × every class of bad input it takes (empty, escape-laden or 100,000-character
names; durations of 0s, without a unit, infinite or of 100,000 days; inf/nan numbers; ports
out of range; URLs that are not URLs; a FIFO, a 9 MiB file or a directory as --config; bad
settings variables; a wrong-shaped --slices file): each is refused with exit 2 and one line
that names the flag, argument, file or variable — never "unexpected … report it".

The cases are generated from the commands' own parameters (``tests.cli_commands``), so a
command or flag added later is covered by the class its parameter belongs to.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from gpuguard.cli.main import app
from tests import cli_commands

NO_API = "http://127.0.0.1:9"  # discard port: refused at once, if a case ever got that far
HUGE = "a" * 100_000
ESC = "gpu\x1b[31m-node"

# A valid invocation of every command that takes one of the parameters below; {node}, {file}
# and {scenario_ref} are positional arguments, other {...} fixture paths.
BASE: dict[str, list[str]] = {
    "agent": ["--node", "gpu-node-a", "--kernel-log", "{kernlog}", "--state-dir", "{state}"],
    "audit": ["--kube-server", NO_API],
    "backtest": ["--prometheus-url", NO_API],
    "breaker reset": ["--kube-server", NO_API, "--dry-run"],
    "burnin": ["--device", "cpu", "--size", "8", "--duration", "1s"],
    **{f"change {verb}": ["c1", "--kube-server", NO_API]
       for verb in ("abort", "pause", "resume", "status")},
    "change drift": ["--kube-server", NO_API],
    "check": ["--root", "{root}"],
    "demo": ["--scenario", "xid79-twice"],
    "evidence": ["--root", "{root}", "--kernel-log", "{kernlog}", "--no-nvidia-smi"],
    "explain": ["{node}", "--kube-server", NO_API],
    "gate": ["{node}", "--kube-server", NO_API, "--dry-run"],
    "gpu-isolate kernel-module-config": ["--nodes", "{nodes}"],
    "gpu-isolate taint-rule": ["--node", "gpu-node-a", "--uuid", "GPU-1", "--slices", "{slices}"],
    "health": ["{node}", "--kube-server", NO_API],
    "hygiene": ["--kube-server", NO_API],
    "ledger add": ["--node", "gpu-node-b", "--xid", "79", "--pci", "0000:99:00.0", "--uuid",
                   "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d", "--at", "2026-09-10T13:03:59Z",
                   "--kube-server", NO_API],
    "ledger amend": ["--why", "x", "--by", "sre", "--id", "3f2a9c01b7de", "--set-verdict",
                     "rma", "--kube-server", NO_API],
    "ledger export": ["--kube-server", NO_API],
    "ledger list": ["--kube-server", NO_API],
    "ledger remove": ["--why", "x", "--by", "sre", "--id", "3f2a9c01b7de", "--kube-server",
                      NO_API],
    "manifest job burnin": ["--node", "gpu-node-a", "--gpus", "8"],
    "manifest job evidence": ["--node", "gpu-node-a"],
    "manifest job gpu-reset": ["--node", "gpu-node-a", "--uuid", "GPU-0a8e0faa-d59d"],
    "once": ["--dry-run", "--kube-server", NO_API],
    "phantom": ["--prometheus-url", NO_API],
    "run": ["--kube-server", NO_API],
    "sim serve": ["{scenario_ref}", "--no-prometheus"],
    "sim run": ["{scenario_ref}"],
    "gpu-isolate apply": ["--uuid", "GPU-1", "--root", "{root}"],
    "gpu-isolate undo": ["--uuid", "GPU-1", "--root", "{root}"],
    "xid explain": ["79"],
    "xid parse": ["{file}"],
    "status": ["--kube-server", NO_API],
    "utilization": ["--prometheus-url", NO_API],
}

DURATIONS = [("zero", "0s"), ("no-unit", "5"), ("inf", "inf"), ("100000-days", "100000d"),
             ("negative", "-5m")]
BAD_VALUES: dict[str, list[tuple[str, str]]] = {
    "node": [("empty", ""), ("escape", ESC), ("100k-chars", HUGE), ("spaces", "gpu node")],
    "namespace": [("uppercase", "Bad_NS"), ("escape", "ns\x1b]0;x\x07"), ("100k-chars", HUGE)],
    "burnin_namespace": [("uppercase", "Bad_NS"), ("empty", "")],
    "prometheus_url": [("not-a-url", "notaurl"), ("escape", "http://a\x1b[31m.b"),
                       ("port-70000", "http://h:70000"), ("100k-chars", f"http://{HUGE}")],
    "kube_server": [("not-a-url", "notaurl"), ("escape", "http://a\x1b[31m.b"),
                    ("port-70000", "http://h:70000")],
    "step": DURATIONS, "duration": DURATIONS, "dcgm_timeout": DURATIONS,
    "check_interval": DURATIONS, "since": DURATIONS,
    "start": [("100000-days", "now-100000d"), ("no-unit", "now-5"), ("zero", "now-0s")],
    "end": [("no-unit", "now-5")],
    "timeout": [("inf", "inf"), ("nan", "nan"), ("zero", "0")],
    "speed": [("inf", "inf"), ("nan", "nan"), ("zero", "0")],
    "floor": [("inf", "inf"), ("nan", "nan"), ("negative", "-1")],
    "port": [("70000", "70000"), ("negative", "-1")],
    "metrics_port": [("70000", "70000"), ("negative", "-1")],
    "config": [("fifo", "{fifo}"), ("9-mib", "{big}"), ("directory", "{root}")],
    "slices": [("wrong-shape", "{wrong_shape}"), ("fifo", "{fifo}")],
    "xid_overrides": [("fifo", "{fifo}"), ("9-mib", "{big}"), ("directory", "{root}")],
    "overrides": [("fifo", "{fifo}"), ("9-mib", "{big}"), ("directory", "{root}")],
    "scenario_ref": [("fifo", "{fifo}"), ("9-mib", "{big}"), ("directory", "{root}")],
    "scenarios": [("fifo", "{fifo}"), ("9-mib", "{big}")],
    "file": [("directory", "{root}"), ("missing", "{root}/nope.log")],
}
SETTINGS_VARIABLES = [
    ("GPUGUARD_CONTROLLER__INTERVAL", "0s"),
    ("GPUGUARD_PROMETHEUS__TIMEOUT", "5"),
    ("GPUGUARD_NOTIFICATIONS__WEBHOOK_URL", "notaurl"),
    ("GPUGUARD_PROMETHEUS__URL", "http://a\x1b[31m.b"),
]


@dataclass(frozen=True)
class Case:
    command: str
    argv: tuple[str, ...]
    names: str  # what the one line must name
    env: tuple[tuple[str, str], ...] = ()


def _params(command: str) -> list[Any]:
    found: Any = typer.main.get_command(app)
    for word in command.split():
        found = found.commands[word]
    return list(found.params)


def _with(base: list[str], param: Any, value: str) -> tuple[list[str], str]:
    """``base`` with ``param`` set to ``value``; and what the refusal must name."""
    if not param.opts[0].startswith("-"):  # a positional argument
        return [value if word == f"{{{param.name}}}" else word for word in base], param.name
    flag = param.opts[0]
    argv = list(base)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv, flag


def _cases() -> dict[str, Case]:
    cases = {}
    for command in (c for c in cli_commands.leaf_commands() if c in BASE):
        base = BASE[command]
        for param in _params(command):
            for label, value in BAD_VALUES.get(param.name, []):
                argv, names = _with(base, param, value)
                names = value if value.startswith("{") else names  # a file: its path
                cases[f"{command}:{param.opts[0].lstrip('-')}:{label}"] = Case(
                    command, tuple(argv), names)
            if param.name == "config":
                for variable, value in SETTINGS_VARIABLES:
                    cases[f"{command}:{variable}"] = Case(
                        command, tuple(base), variable, ((variable, value),))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("bad")
    os.mkfifo(tmp / "fifo")
    (tmp / "big.yaml").write_bytes(b"# padding\n" * (900 * 1024))
    (tmp / "wrong.json").write_text('{"kind": "ResourceSliceList", "items": 5}')
    (tmp / "nodes.json").write_text('{"kind": "NodeList", "items": []}')
    (tmp / "kern.log").write_text("")
    (tmp / "root").mkdir()
    return {
        "fifo": str(tmp / "fifo"), "big": str(tmp / "big.yaml"), "root": str(tmp / "root"),
        "wrong_shape": str(tmp / "wrong.json"), "slices": str(tmp / "wrong.json"),
        "nodes": str(tmp / "nodes.json"), "kernlog": str(tmp / "kern.log"),
        "state": str(tmp / "state"),
        "node": "gpu-node-a", "file": str(tmp / "kern.log"), "scenario_ref": "xid79-twice",
    }


def run_case(case: Case, files: dict[str, str]) -> tuple[int, str]:
    """The exit status and the stderr of ``case``."""
    argv = [*case.command.split(), *(word.format(**files) for word in case.argv)]
    env = {"COLUMNS": "200", "KUBECONFIG": "/nonexistent", **dict(case.env)}
    result = CliRunner(env=env).invoke(app, argv)
    return result.exit_code, result.stderr


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_refused_naming_it(name: str, files: dict[str, str]) -> None:
    case = CASES[name]
    code, stderr = run_case(case, files)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[:2000]
    assert "unexpected" not in lines[0], lines[0]
    assert code == 2, lines[0]
    assert case.names.format(**files).lower() in lines[0].lower(), lines[0]


def test_every_command_with_such_inputs_has_a_valid_invocation() -> None:
    """A command that takes one of these parameters is in BASE (so it gets its cases)."""
    classes = set(BAD_VALUES) | {"config"}
    missing = [c for c in cli_commands.leaf_commands()
               if c not in BASE and classes & {p.name for p in _params(c)}]
    assert missing == []
