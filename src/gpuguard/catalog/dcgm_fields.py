"""Every dcgm-exporter field gpuguard reads, whether dcgm-exporter collects it by default, and
which of gpuguard's checks go blind without it.

dcgm-exporter only exports the fields its counters CSV lists. Its default file
(``etc/default-counters.csv``, NVIDIA/dcgm-exporter @ d5e5f510a1b6b393f39a43293ccd9dc985defc79,
Apache-2.0; summarised in tests/data/reference/dcgm_exporter_counters.md) leaves out some that
gpuguard reads -- SM activity and occupancy, the P-state, the pending row remap, volatile DBEs,
the PCIe link and the Xid count among them -- and a missing field is silence, not health. So
the chart ships a counters file with all of them (``counters_csv``; deploy/helm/gpuguard
``dcgmExporter.counters``) and the audit names each field Prometheus lacks and what that costs
(rule DCGM-3). Pure data; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuguard.model import metric_names as names


@dataclass(frozen=True, slots=True)
class DcgmField:
    """One field: its exporter name, Prometheus type, help text, whether dcgm-exporter's
    default counters file enables it, and what gpuguard cannot see without it."""

    name: str
    kind: str
    help: str
    default: bool
    blind: str


_IDLE = "phantom-utilization and busy-GPU diagnosis (docs/design.md#phantom)"
_REMAP = "row-remap detection and the return-to-pool remap check"
_LINK = "the return-to-pool PCIe link check (width/generation back to nominal)"
_NVLINK = "audit NVLINK-1 (NVLink CRC/replay/recovery errors)"

FIELDS: tuple[DcgmField, ...] = (
    DcgmField(names.DCGM_XID_LAST, "gauge", "Value of the last XID error encountered.", True,
              "Xid detection on nodes without the gpuguard agent"),
    DcgmField(names.DCGM_XID_COUNT, "counter", "reported XIDs during last window", False,
              "counted Xids per code (the last-Xid gauge is used instead, which a user "
              "Xid can mask for 24 h)"),
    DcgmField(names.DCGM_GPU_UTIL, "gauge", "GPU utilization (in %).", True,
              f"{_IDLE}; GPU presence in the utilisation window"),
    DcgmField(names.DCGM_FB_USED, "gauge", "Framebuffer memory used (in MiB).", True, _IDLE),
    DcgmField(names.DCGM_FB_FREE, "gauge", "Framebuffer memory free (in MiB).", True,
              "memory headroom in utilisation reports"),
    DcgmField(names.DCGM_FB_RESERVED, "gauge", "Framebuffer memory reserved (in MiB).", True,
              "memory accounting in utilisation reports"),
    DcgmField(names.DCGM_POWER, "gauge", "Power draw (in W).", True,
              "the wasted-power estimate of phantom GPUs"),
    DcgmField(names.DCGM_GPU_TEMP, "gauge", "GPU temperature (in C).", True,
              "the GPU temperature alert"),
    DcgmField(names.DCGM_SM_CLOCK, "gauge", "SM clock frequency (in MHz).", True, _IDLE),
    DcgmField(names.DCGM_MEM_CLOCK, "gauge", "Memory clock frequency (in MHz).", True,
              "clock reports"),
    DcgmField(names.DCGM_PSTATE, "gauge", "Performance state (P-State) 0-15.", False,
              f"{_IDLE}: the P0 (clocks pinned) part of the phantom signature"),
    DcgmField(names.DCGM_SM_ACTIVE, "gauge",
              "The ratio of cycles an SM has at least 1 warp assigned.", False,
              f"{_IDLE}: SM activity, the phantom signature's first term"),
    DcgmField(names.DCGM_SM_OCCUPANCY, "gauge",
              "The ratio of number of warps resident on an SM.", False,
              "the low-occupancy diagnosis of a busy GPU"),
    DcgmField(names.DCGM_TENSOR_ACTIVE, "gauge",
              "Ratio of cycles the tensor (HMMA) pipe is active.", True,
              "the precision/shape diagnosis of a busy GPU"),
    DcgmField(names.DCGM_DRAM_ACTIVE, "gauge",
              "Ratio of cycles the device memory interface is active sending or receiving "
              "data.", True, f"{_IDLE}: DRAM activity; the memory-bound diagnosis"),
    DcgmField(names.DCGM_GR_ENGINE_ACTIVE, "gauge",
              "Ratio of time the graphics engine is active.", True, _IDLE),
    DcgmField(names.DCGM_UNCORRECTABLE_REMAPPED_ROWS, "counter",
              "Number of remapped rows for uncorrectable errors", True, _REMAP),
    DcgmField(names.DCGM_CORRECTABLE_REMAPPED_ROWS, "counter",
              "Number of remapped rows for correctable errors", True, _REMAP),
    DcgmField(names.DCGM_ROW_REMAP_FAILURE, "gauge", "Whether remapping of rows has failed",
              True, f"{_REMAP}: a failed remap (RMA criterion)"),
    DcgmField(names.DCGM_ROW_REMAP_PENDING, "gauge", "Whether remapping of rows is pending",
              False, "the return-to-pool check that a pending remap was activated by a reset"),
    DcgmField(names.DCGM_ECC_DBE_VOLATILE, "counter",
              "Total number of double-bit volatile ECC errors.", False,
              "double-bit ECC errors between Xid 48 lines (memory-class faults)"),
    DcgmField(names.DCGM_PCIE_LINK_GEN, "gauge", "PCIe link generation.", False, _LINK),
    DcgmField(names.DCGM_PCIE_LINK_WIDTH, "gauge", "PCIe link width.", False, _LINK),
    DcgmField(names.DCGM_PCIE_MAX_LINK_GEN, "gauge", "PCIe maximum link generation.", False,
              _LINK),
    DcgmField(names.DCGM_PCIE_MAX_LINK_WIDTH, "gauge", "PCIe maximum link width.", False,
              _LINK),
    DcgmField(names.DCGM_PCIE_REPLAY, "counter", "Total number of PCIe retries.", True,
              "audit PCIE-1 (PCIe replays growing)"),
    DcgmField(names.DCGM_CLOCKS_EVENT_REASONS, "gauge",
              "Current clock event reasons (bitmask).", False,
              "audit THROTTLE-1 (thermal or power slowdown)"),
    DcgmField(names.DCGM_NVLINK_CRC_FLIT, "counter",
              "Total number of NVLink flow-control CRC errors.", False, _NVLINK),
    DcgmField(names.DCGM_NVLINK_CRC_DATA, "counter",
              "Total number of NVLink data CRC errors.", False, _NVLINK),
    DcgmField(names.DCGM_NVLINK_REPLAY, "counter", "Total number of NVLink retries.", False,
              _NVLINK),
    DcgmField(names.DCGM_NVLINK_RECOVERY, "counter",
              "Total number of NVLink recovery errors.", False, _NVLINK),
)
"""In the order of the counters file."""

ALIASES = frozenset({names.DCGM_CLOCK_THROTTLE_REASONS})
"""Older names of a listed field (DCGM < 3.3): read when present, never written to the CSV."""


def counters_csv() -> str:
    """dcgm-exporter's counters file with every field gpuguard reads."""
    header = (
        "# dcgm-exporter counters: every DCGM field gpuguard reads "
        "(gpuguard.catalog.dcgm_fields; do not edit, regenerate).\n"
        "# Format: DCGM FIELD, Prometheus metric type, help message\n"
    )
    return header + "".join(f"{f.name}, {f.kind}, {f.help}\n" for f in FIELDS)


def not_collected(present: frozenset[str]) -> tuple[DcgmField, ...]:
    """The fields gpuguard reads that are not among ``present`` (or an alias of theirs)."""
    return tuple(f for f in FIELDS if f.name not in present and not _alias_present(f, present))


def _alias_present(field: DcgmField, present: frozenset[str]) -> bool:
    return field.name == names.DCGM_CLOCKS_EVENT_REASONS and bool(ALIASES & present)
