"""PCIe AER counters as the kernel prints them in sysfs, and reading a root port's set.

``aer_dev_correctable``/``aer_dev_fatal``/``aer_dev_nonfatal`` hold one ``NAME COUNT`` line per
error type and a ``TOTAL_ERR_COR``/``TOTAL_ERR_FATAL``/``TOTAL_ERR_NONFATAL`` line; a root port
also has ``aer_rootport_total_err_cor``/``_fatal``/``_nonfatal`` (one number each: errors its
downstream devices reported to it). A file that is absent is not an error (AER may be off); one
that does not parse is, and makes the port's evidence UNKNOWN.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuguard.agent.checks import hostfs
from gpuguard.agent.evidence import hostread
from gpuguard.errors import InputError
from gpuguard.model import evidence

DEVICE_FILES = {
    "correctable": ("aer_dev_correctable", "TOTAL_ERR_COR"),
    "nonfatal": ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
    "fatal": ("aer_dev_fatal", "TOTAL_ERR_FATAL"),
}
ROOTPORT_FILES = {
    "rootport_correctable": "aer_rootport_total_err_cor",
    "rootport_nonfatal": "aer_rootport_total_err_nonfatal",
    "rootport_fatal": "aer_rootport_total_err_fatal",
}


def parse_counters(text: str, *, name: str) -> dict[str, int]:
    """``NAME COUNT`` lines -> {NAME: COUNT}; InputError naming the file and line otherwise."""
    counters: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdecimal():
            raise InputError(f"{name} line {number}: expected 'NAME COUNT', got {line!r}")
        counters[parts[0]] = int(parts[1])
    if not counters:
        raise InputError(f"{name}: empty")
    return counters


def total(counters: dict[str, int], total_name: str) -> int:
    """The file's TOTAL_ERR_* line, or the sum of its counters when the kernel printed none."""
    if total_name in counters:
        return counters[total_name]
    return sum(counters.values())


def parse_number(text: str, *, name: str) -> int:
    value = text.strip()
    if not value.isdecimal():
        raise InputError(f"{name}: expected a count, got {value!r}")
    return int(value)


@dataclass(frozen=True, slots=True)
class PortRead:
    """A root port's counters plus what could not be read (each problem names its file)."""

    counters: evidence.AerCounters
    problems: tuple[str, ...]
    files_found: int


def read_port(root: Path, port_dir: str, port: str) -> PortRead:
    """Read every AER file of the port whose sysfs directory is ``port_dir`` (host path)."""
    values: dict[str, int | None] = {}
    nonzero: list[str] = []
    problems: list[str] = []
    found = 0
    for field_name, (file_name, total_name) in DEVICE_FILES.items():
        text = _read_if_present(root, f"{port_dir}/{file_name}", problems)
        found += text is not None
        values[field_name] = _device_total(text, file_name, total_name, nonzero, problems)
    for field_name, file_name in ROOTPORT_FILES.items():
        text = _read_if_present(root, f"{port_dir}/{file_name}", problems)
        found += text is not None
        values[field_name] = _rootport_total(text, file_name, nonzero, problems)
    counters = evidence.AerCounters(port=port, nonzero=tuple(nonzero), **values)
    return PortRead(counters, tuple(problems), found)


def _read_if_present(root: Path, rel: str, problems: list[str]) -> str | None:
    if not hostfs.exists(root, rel):
        return None
    try:
        return hostread.read_text(root, rel)
    except hostfs.HostReadError as e:
        problems.append(str(e))
        return None


def _device_total(
    text: str | None, file_name: str, total_name: str, nonzero: list[str], problems: list[str]
) -> int | None:
    if text is None:
        return None
    try:
        counters = parse_counters(text, name=file_name)
    except InputError as e:
        problems.append(str(e))
        return None
    nonzero.extend(
        f"{file_name}:{name}={count}"
        for name, count in counters.items()
        if count and not name.startswith("TOTAL_")
    )
    return total(counters, total_name)


def _rootport_total(
    text: str | None, file_name: str, nonzero: list[str], problems: list[str]
) -> int | None:
    if text is None:
        return None
    try:
        count = parse_number(text, name=file_name)
    except InputError as e:
        problems.append(str(e))
        return None
    if count:
        nonzero.append(f"{file_name}={count}")
    return count
