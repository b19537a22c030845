"""The host side of a GPU isolation, run by the pinned isolation Job (docs/gpu-isolation.md).

``apply`` takes the listed GPUs out on this host and checks that it held:

- compute mode PROHIBITED (``nvidia-smi -i <uuid> -c PROHIBITED``): new CUDA contexts on the
  GPU fail, inside containers and for jobs started on the host outside Kubernetes. NVML: "not
  persistent across reboots and always resets to Default" — so it is re-applied after every
  boot (and after a GPU reset);
- the host's exclusion list (``/etc/gpuguard/excluded-gpus``, one UUID a line): the host's
  record of what is isolated, for a person on the node (the device plugin that leaves the GPU
  out is chosen by node labels, docs/gpu-isolation.md); a file on disk, it outlives a reboot.

``undo`` reverses both for the listed GPUs and reads each one's row-remap state (a pending
remap is applied only by a GPU reset, a failed one needs the card replaced: NVIDIA's row
remapping documentation), one of the return checks. Each returns a report (JSON on one line,
the Job's termination message): per GPU what was applied, the compute mode read back afterwards, and
whether the host's kernel log shows a hardware Xid for that card (which confirms the fault for
the breaker and the card's fault ledger, docs/breaker.md#gpu-isolations) — hardware in the
classes the controller acts on: the packaged catalog with the cluster's override file, which
the Job is given (``--xid-overrides``). Nothing here decides what to isolate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

from gpuguard.agent.evidence import kernel
from gpuguard.catalog import xid as xid_catalog
from gpuguard.errors import GpuguardError, InputError
from gpuguard.kernlog import scan
from gpuguard.model import ports

EXCLUDED_FILE = Path("etc/gpuguard/excluded-gpus")
PROHIBITED = "PROHIBITED"
DEFAULT = "DEFAULT"
ABSENT = "absent"  # the driver does not know this card
SMI_TIMEOUT_S = 20.0


class HostError(GpuguardError):
    """A host command failed (the message names it)."""


class GpuControl(Protocol):
    """What the isolation needs of a host: compute modes and the exclusion list."""

    def compute_modes(self) -> dict[str, str]:
        """Compute mode by UUID of every GPU the driver answers for (``DEFAULT``,
        ``PROHIBITED``, ...); raises HostError when the driver cannot be asked."""
        ...

    def set_compute_mode(self, uuid: str, mode: str) -> None: ...

    def excluded(self) -> set[str]: ...

    def write_excluded(self, uuids: set[str]) -> None: ...

    def remap_pending(self, uuid: str) -> bool | None:
        """A row remap pending or failed on the GPU (None: the card has no row remapping)."""
        ...


@dataclass(frozen=True, slots=True)
class GpuReport:
    uuid: str
    compute_mode: str  # read back after applying ("unknown": the driver did not answer)
    excluded: bool
    kernel_fault: bool  # a hardware Xid for this card is in the host's kernel log
    error: str = ""
    remap_pending: bool | None = None  # undo only: a row remap pending or failed (None: n/a)


@dataclass(frozen=True, slots=True)
class Report:
    action: str  # apply / undo
    gpus: tuple[GpuReport, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Every GPU as wanted; a card the driver does not know (``absent``: excluded at
        module load, or it left the host) is out, and on undo it is gone, both as wanted."""
        applying = self.action == "apply"
        wanted = {PROHIBITED, ABSENT} if applying else {DEFAULT, ABSENT}
        return all(
            not g.error and g.compute_mode in wanted and g.excluded == applying for g in self.gpus
        )

    def to_json(self) -> str:
        data = {"action": self.action, "ok": self.ok, "gpus": [asdict(g) for g in self.gpus],
                "notes": list(self.notes)}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


def apply(
    control: GpuControl, uuids: Sequence[str], root: Path, classes: xid_catalog.XidCatalog
) -> Report:
    """Exclude first (a device-plugin restart in between must not re-advertise the GPU), then
    PROHIBITED, then read both back. ``classes`` says which Xids are hardware faults."""
    return _run("apply", control, uuids, root, PROHIBITED, classes)


def undo(
    control: GpuControl, uuids: Sequence[str], root: Path, classes: xid_catalog.XidCatalog
) -> Report:
    return _run("undo", control, uuids, root, DEFAULT, classes)


def _run(
    action: str,
    control: GpuControl,
    uuids: Sequence[str],
    root: Path,
    mode: str,
    classes: xid_catalog.XidCatalog,
) -> Report:
    errors: dict[str, str] = {}
    try:
        listed = control.excluded()
        control.write_excluded(listed | set(uuids) if mode == PROHIBITED else listed - set(uuids))
    except HostError as e:
        errors = dict.fromkeys(uuids, str(e))
    for uuid in uuids:
        try:
            control.set_compute_mode(uuid, mode)
        except HostError as e:
            if mode == PROHIBITED:
                errors.setdefault(uuid, str(e))
    notes: list[str] = []
    try:
        modes = control.compute_modes()
        missing = ABSENT
    except HostError as e:
        modes, notes, missing = {}, [f"compute modes not read back: {e}"], "unknown"
    faulty, note = _kernel_faults(root, classes)
    notes += [note] if note else []
    try:
        excluded = control.excluded()
    except HostError as e:
        excluded, notes = set(), [*notes, str(e)]
    gpus = tuple(_gpu(u, modes.get(u, missing), u in excluded, u in faulty, errors.get(u, ""))
                 for u in uuids)
    if mode == DEFAULT:
        gpus = tuple(_with_remap(control, g, notes) for g in gpus)
    return Report(action, gpus, tuple(notes))


def _with_remap(control: GpuControl, gpu: GpuReport, notes: list[str]) -> GpuReport:
    """The GPU's row-remap state; unreadable counts as pending (an unknown state never
    returns a card)."""
    if gpu.compute_mode == ABSENT:
        return gpu
    try:
        pending = control.remap_pending(gpu.uuid)
    except HostError as e:
        notes.append(f"row-remap state not read: {e}")
        pending = True
    return replace(gpu, remap_pending=pending)


def _gpu(uuid: str, mode: str, excluded: bool, faulty: bool, error: str) -> GpuReport:
    """A card the driver does not attach (``NVreg_ExcludedGpus`` at the last module load, or
    gone) has no compute mode to set: that is no error."""
    return GpuReport(uuid, mode, excluded, faulty, "" if mode == ABSENT else error)


def _kernel_faults(root: Path, classes: xid_catalog.XidCatalog) -> tuple[set[str], str]:
    """Cards with a hardware Xid (or fallen off the bus) in the host's kernel log."""
    path = next((root / f for f in kernel.KERNEL_LOG_FILES if (root / f).is_file()), None)
    if path is None:
        return set(), f"no kernel log file under {root} ({', '.join(kernel.KERNEL_LOG_FILES)})"
    try:
        events = list(scan.scan_file(path))
    except InputError as e:
        return set(), f"kernel log not read: {e}"
    return {e.uuid for e in events if e.uuid and classes.judges_hardware(e)}, ""


class NvidiaSmi:
    """GpuControl on a real host: ``nvidia-smi`` through a CommandRunner, the exclusion list
    under ``root`` (the host's filesystem as the Job mounts it)."""

    def __init__(self, runner: ports.CommandRunner, root: Path) -> None:
        self._runner = runner
        self._file = root / EXCLUDED_FILE

    def compute_modes(self) -> dict[str, str]:
        out = self._smi(["--query-gpu=uuid,compute_mode", "--format=csv,noheader"])
        return dict(_mode_line(line) for line in out.splitlines() if "," in line)

    def set_compute_mode(self, uuid: str, mode: str) -> None:
        self._smi(["-i", uuid, "-c", mode])

    def excluded(self) -> set[str]:
        try:
            text = self._file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return set()
        except OSError as e:
            raise HostError(f"cannot read {self._file}: {e.strerror}") from e
        return _uuids(text.splitlines())

    def write_excluded(self, uuids: set[str]) -> None:
        try:
            self._file.parent.mkdir(parents=True, exist_ok=True)
            self._file.write_text("".join(f"{u}\n" for u in sorted(uuids)), encoding="utf-8")
        except OSError as e:
            raise HostError(f"cannot write {self._file}: {e.strerror}") from e

    def remap_pending(self, uuid: str) -> bool | None:
        query = "--query-remapped-rows=remapped_rows.pending,remapped_rows.failure"
        out = self._smi(["-i", uuid, query, "--format=csv,noheader"]).strip()
        values = [v.strip().lower() for v in out.split(",")]
        if any(v in ("yes", "1", "true") for v in values):
            return True
        if values and all(v in ("no", "0", "false") for v in values):
            return False
        return None  # [N/A]: a card without row remapping (pre-Ampere, some GeForce)

    def _smi(self, args: list[str]) -> str:
        result = self._runner.run(["nvidia-smi", *args], timeout_s=SMI_TIMEOUT_S)
        if result.returncode != 0:
            why = "timed out" if result.timed_out else (result.stderr or result.stdout).strip()
            raise HostError(f"nvidia-smi {' '.join(args)}: {why}")
        return result.stdout


def _mode_line(line: str) -> tuple[str, str]:
    uuid, mode = (part.strip() for part in line.split(",", 1))
    return uuid, mode.upper()


def _uuids(lines: Iterable[str]) -> set[str]:
    return {line.strip() for line in lines if line.strip().startswith("GPU-")}
