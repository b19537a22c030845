"""Persistent GPU states read every cycle: the driver's recovery action and the NVLink fabric.

A kernel line is seen once. When the agent misses an Xid 154 "GPU Reset Required" (it was
down, the journal rotated, the line came before the agent's first read), the driver still
holds the state: ``nvidia-smi --query-gpu=gpu_recovery_action`` answers it on every read
(NVML ``nvmlDeviceGpuRecoveryAction_t``, R550+). Likewise the NVLink fabric: on NVSwitch and
GB200 systems a GPU joins the fabric through Fabric Manager, and ``fabric.state`` /
``fabric.status`` say whether it did (gpud and NVSentinel read the same NVML fabric info).

- ``gpu-recovery``: FAIL when any GPU's driver asks for a reset, a reboot or a drain; WARN
  when the driver does not report the field (older than R550: the state cannot be read);
  UNKNOWN when nvidia-smi times out, fails or answers garbage.
- ``nvlink-fabric``: PASS when every GPU's fabric state is ``Completed`` with ``Success`` or
  the node has no fabric (``N/A``); WARN while registration is ``In Progress``; FAIL when a
  GPU's registration finished with an error or never started (Fabric Manager down).

nvidia-smi is the one the NVIDIA container toolkit puts in the agent's container
(``agent.evidence.hostcmd``), run with a hard timeout; only these query fields are asked
for, never firmware or clocks. Without it (the agent runs without the NVIDIA runtime) both
checks WARN, naming what stays unread, rather than block the onboarding gate of every node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuguard.agent.checks import result
from gpuguard.agent.evidence import hostcmd
from gpuguard.model import pci, ports

RECOVERY = "gpu-recovery"
FABRIC = "nvlink-fabric"
PROGRAM = "nvidia-smi"
_NOT_REPORTED = {"[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]"}
_FINE_RECOVERY = {"none"}
_FABRIC_DONE = ("completed", "success")
_FABRIC_NONE = {"n/a", "[n/a]", "[not supported]", "not supported"}


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One GPU's answer: its PCI address and the queried values, as printed."""

    pci: str
    values: tuple[str, ...]


def query_argv(fields: tuple[str, ...]) -> list[str]:
    return [PROGRAM, f"--query-gpu=pci.bus_id,{','.join(fields)}", "--format=csv,noheader"]


def check_recovery(runner: ports.CommandRunner, timeout_s: float) -> result.CheckResult:
    """The driver's recovery action per GPU (see the module docstring)."""
    return _run(RECOVERY, ("gpu_recovery_action",), runner, timeout_s, judge_recovery)


def check_fabric(runner: ports.CommandRunner, timeout_s: float) -> result.CheckResult:
    """The NVLink fabric registration per GPU (see the module docstring)."""
    return _run(FABRIC, ("fabric.state", "fabric.status"), runner, timeout_s, judge_fabric)


def judge_recovery(rows: list[GpuRow]) -> result.CheckResult:
    asking = [r for r in rows if _low(r.values[0]) not in _FINE_RECOVERY | _NOT_REPORTED]
    if asking:
        shown = "; ".join(f"{r.pci}: {r.values[0]}" for r in asking)
        return result.failed(
            RECOVERY, f"the driver asks for recovery: {shown}",
            "drain the GPU's work, then do what the driver asks (GPU reset or node reboot); "
            "the state persists until done, even if the Xid 154 line was missed",
        )
    if any(_low(r.values[0]) in _NOT_REPORTED for r in rows):
        return result.warned(
            RECOVERY, "the driver does not report a recovery action (older than R550): "
            "a missed Xid 154 cannot be seen again on this node",
        )
    return result.passed(RECOVERY, f"no recovery action pending on {len(rows)} GPU(s)")


def judge_fabric(rows: list[GpuRow]) -> result.CheckResult:
    states = [(r.pci, _low(r.values[0]), _low(r.values[1])) for r in rows]
    failed = [s for s in states if s[1] not in _FABRIC_NONE and s[1:] != _FABRIC_DONE
              and s[1] != "in progress"]
    if failed:
        shown = "; ".join(f"{p}: state {s}, status {t}" for p, s, t in failed)
        return result.failed(
            FABRIC, f"NVLink fabric registration failed or never started: {shown}",
            "check nvidia-fabricmanager (systemctl status nvidia-fabricmanager, its log) "
            "and the NVSwitch SXid lines (gpuguard_sxid_total); restart it",
        )
    if any(s[1] == "in progress" for s in states):
        return result.warned(FABRIC, "NVLink fabric registration in progress")
    if all(s[1] in _FABRIC_NONE for s in states):
        return result.passed(FABRIC, "no NVLink fabric on this node (fabric state N/A)")
    return result.passed(FABRIC, f"{len(rows)} GPU(s) registered with the NVLink fabric")


def failing_gpus(evidence: str) -> list[tuple[str, str]]:
    """The (PCI, what it says) pairs a FAIL's evidence of either check names, in its order:
    the node conditions name the GPUs from it (``agent.conditions``)."""
    _, sep, listed = evidence.partition(": ")
    pairs = (part.partition(": ") for part in listed.split("; ")) if sep else ()
    return [(p, said) for p, colon, said in pairs if colon and pci.try_normalize_pci(p)]


def parse_rows(stdout: str, width: int) -> list[GpuRow] | None:
    """``pci, value, ...`` lines; None when a line does not have ``width`` values or a PCI."""
    rows = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        address = pci.try_normalize_pci(cells[0])
        if len(cells) != width + 1 or address is None:
            return None
        rows.append(GpuRow(address, tuple(cells[1:])))
    return rows or None


def _run(
    name: str,
    fields: tuple[str, ...],
    runner: ports.CommandRunner,
    timeout_s: float,
    judge: Callable[[list[GpuRow]], result.CheckResult],
) -> result.CheckResult:
    outcome = runner.run(query_argv(fields), timeout_s=timeout_s)
    command = " ".join(outcome.argv)
    if outcome.timed_out:
        return result.unknown(name, f"`{command}` timed out after {timeout_s}s")
    if outcome.returncode == hostcmd.NOT_FOUND:
        return result.warned(
            name, f"{PROGRAM} is not in the agent's container: this state is not read here",
            "run the agent with the NVIDIA runtime (NVIDIA_DRIVER_CAPABILITIES=utility)",
        )
    if outcome.returncode != 0:
        answer = outcome.stderr.strip() or outcome.stdout.strip()
        return result.unknown(name, f"`{command}` exited {outcome.returncode}: {answer[:200]}")
    rows = parse_rows(outcome.stdout, len(fields))
    if rows is None:
        return result.unknown(name, f"`{command}` answered no GPU line it could read")
    return judge(rows)


def _low(value: str) -> str:
    return " ".join(value.lower().split())
