"""What ``nvidia-smi --query-gpu=pci.bus_id,... --format=csv,noheader`` prints on a simulated node.

The agent's persistent-state checks (``agent.checks.gpu_state``) ask it for the driver's
recovery action and the NVLink fabric registration; this renders the world's answer the way
nvidia-smi prints it: one line per GPU on the bus, the PCI address with nvidia-smi's 8-digit
domain (``00000000:99:00.0``), values as printed (``None``, ``GPU Reset``, ``Completed``,
``N/A``). A field the world does not model is ``[N/A]``, as nvidia-smi prints an unsupported one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuguard.sim import state

QUERY = "--query-gpu="
_FIELDS: dict[str, Callable[[state.SimGpu], str]] = {
    "pci.bus_id": lambda g: "0000" + g.pci.upper(),  # 0000:9b:00.0 -> 00000000:9B:00.0
    "gpu_recovery_action": lambda g: g.recovery_action,
    "fabric.state": lambda g: g.fabric_state,
    "fabric.status": lambda g: g.fabric_status,
}


def fields_of(argv: Sequence[str]) -> list[str] | None:
    """The fields of a ``--query-gpu=`` argument; None when argv asks no such query."""
    asked = next((a.removeprefix(QUERY) for a in argv if a.startswith(QUERY)), None)
    return None if asked is None else asked.split(",")


def answer(node: state.SimNode, fields: Sequence[str]) -> str:
    rows = (", ".join(_FIELDS.get(f, _unsupported)(g) for f in fields)
            for g in node.gpus if g.on_bus)
    return "".join(f"{row}\n" for row in rows)


def _unsupported(gpu: state.SimGpu) -> str:
    return "[N/A]"
