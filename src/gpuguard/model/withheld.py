"""The ``gpuguard.io/withheld`` mark: a fault gpuguard saw on a node and did not isolate
because the breaker withheld it.

The mark keeps the fault pending and visible: it names the fault (so the fault is not lost when
its Xid ages out of the lookback), when it was first withheld and which limit withheld it. A
mark whose reason is ``breaker-tripped`` is also the breaker's trip itself (docs/breaker.md):
while any node carries one, nothing new is isolated. The value is one small JSON object.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime

from gpuguard.model import annotation_keys, decisions, timestamps

KEY = annotation_keys.WITHHELD
PHANTOM_FAULT = str(decisions.Reason.PHANTOM_UTILIZATION)


@dataclass(frozen=True, slots=True)
class WithheldMark:
    reason: decisions.Reason
    since: datetime
    fault: str  # ``xid-79``, ``fallen-off-bus``, ``sxid-20034`` (fabric), ``phantom-utilization``
    gpu: str = ""
    uuid: str = ""
    pci: str = ""

    @property
    def tripped(self) -> bool:
        return self.reason is decisions.Reason.BREAKER_TRIPPED

    @property
    def hardware(self) -> bool:
        return self.fault != PHANTOM_FAULT

    def to_annotation(self) -> str:
        data = asdict(self) | {
            "reason": str(self.reason),
            "since": timestamps.format_utc(self.since),
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


def parse(text: str | None) -> WithheldMark | None:
    """The mark's value read (``fleet.Node.marks.withheld``), or None when there is none or
    it cannot be read (a malformed mark on one node is ignored for that node: the fault is
    judged again from live signals)."""
    if text is None:
        return None
    try:
        data = json.loads(text)
        since = timestamps.parse_utc(str(data["since"]))
        if since is None:
            return None
        return WithheldMark(
            reason=decisions.Reason(str(data["reason"])),
            since=since,
            fault=str(data["fault"]),
            gpu=str(data.get("gpu", "")),
            uuid=str(data.get("uuid", "")),
            pci=str(data.get("pci", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None
