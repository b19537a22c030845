"""What the agent has counted in the kernel log, typed: one row shape per family.

The tally (``agent.exporter.Tally``) keeps these counts as they grow; the node conditions
(``agent.conditions``) read the rows grown since this boot's start; the collector renders them
as labels only at the scrape. The JSON shape (``Counts.as_json``) is what the agent saves with
its kernel-log position and its boot baseline (``agent.position``, ``agent.daemon``), so the
counts survive restarts: Xid and SXid codes are written as text, as they always were, and read
back as numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar


class XidKey(NamedTuple):
    """One ``gpuguard_xid_total`` series: the card, its code and the event rule it matched
    (``""`` when its code's class applies)."""

    gpu: str  # the device minor, "" when the driver's information file is not there
    uuid: str
    pci: str
    xid: int
    rule: str


class CardKey(NamedTuple):
    pci: str
    uuid: str


class SxidKey(NamedTuple):
    pci: str  # the NVSwitch's address
    sxid: int
    severity: str  # Fatal, Non-fatal or ""


@dataclass(frozen=True, slots=True)
class Counts:
    """The agent's counts at one moment. ``recovery``: the last Xid 154 recovery action per card;
    ``uuid_by_pci``: the cards the kernel named; ``lines``/``malformed``: kernel-log lines read
    and records that could not be read."""

    xids: Mapping[XidKey, int] = field(default_factory=dict)
    fallen_off: Mapping[CardKey, int] = field(default_factory=dict)
    recovery: Mapping[CardKey, str] = field(default_factory=dict)
    sxids: Mapping[SxidKey, int] = field(default_factory=dict)
    uuid_by_pci: Mapping[str, str] = field(default_factory=dict)
    lines: int = 0
    malformed: int = 0

    def since(self, start: Counts) -> Counts:
        """The rows whose count grew since ``start`` (this boot's baseline), at today's count."""
        return Counts(
            xids=_grown(self.xids, start.xids),
            fallen_off=_grown(self.fallen_off, start.fallen_off),
            recovery=self.recovery,
            sxids=_grown(self.sxids, start.sxids),
            uuid_by_pci=self.uuid_by_pci,
            lines=self.lines - start.lines,
            malformed=self.malformed - start.malformed,
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "xids": [[g, u, p, str(x), r, n] for (g, u, p, x, r), n in self.xids.items()],
            "fallen_off": [[*key, n] for key, n in self.fallen_off.items()],
            "recovery": [[*key, action] for key, action in self.recovery.items()],
            "sxids": [[p, str(s), sev, n] for (p, s, sev), n in self.sxids.items()],
            "uuid_by_pci": dict(self.uuid_by_pci),
            "lines": self.lines,
            "malformed": self.malformed,
        }

    @classmethod
    def from_json(cls, saved: Mapping[str, Any]) -> Counts:
        """Counts saved by ``as_json``; rows saved before the ``rule`` label (five cells) get
        rule ``""``. ValueError or TypeError on a bad shape."""
        return cls(
            xids={XidKey(str(g), str(u), str(p), int(x), str(r)): int(n)
                  for g, u, p, x, r, n in _xid_rows(saved)},
            fallen_off={CardKey(str(p), str(u)): int(n) for p, u, n in saved.get("fallen_off", [])},
            recovery={CardKey(str(p), str(u)): str(a) for p, u, a in saved.get("recovery", [])},
            sxids={SxidKey(str(p), int(s), str(sev)): int(n)
                   for p, s, sev, n in saved.get("sxids", [])},
            uuid_by_pci={str(k): str(v) for k, v in saved.get("uuid_by_pci", {}).items()},
            lines=int(saved.get("lines", 0)),
            malformed=int(saved.get("malformed", 0)),
        )


def _xid_rows(saved: Mapping[str, Any]) -> list[list[Any]]:
    rows = saved.get("xids", [])
    return [[*row[:4], "", row[4]] if len(row) == 5 else list(row) for row in rows]


K = TypeVar("K")


def _grown(now: Mapping[K, int], start: Mapping[K, int]) -> dict[K, int]:
    return {key: n for key, n in now.items() if n > start.get(key, 0)}
