"""The fault ledger stored in Kubernetes ConfigMaps: no database, safe with concurrent writers,
never near an object size limit.

Layout. One ConfigMap per month and segment, ``gpuguard-ledger-<YYYY-MM>-<n>`` in gpuguard's
namespace, labelled ``app.kubernetes.io/part-of=gpuguard``, ``gpuguard.io/ledger=v1`` and
``gpuguard.io/ledger-month=<YYYY-MM>``. As in the lifecycle report's [docs/design.md#incidents]
``gpu-fault-ledger``, each data key is a node name and its value holds one line per fault::

    2026-09-10T13:03:59Z xid-79 0000:99:00.0 GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d manual \
        confirmed-by-person

(one line, wrapped here: time UTC, ``xid-<code>`` or the fault kind, PCI slot, card UUID,
recorder, optional verdict, how the fault was confirmed; ``-`` for an unknown slot or card).
A line without the last column was written before it existed and reads as confirmed
(``faults.Confirmation``).

Nothing is ever deleted: a person's correction is an audit line in the same node's key (in
the segment of the corrected line's month), with who and why, and reading applies it
(``applied``)::

    2026-10-02T08:00:00Z audit {"op":"remove","target":"<the exact line>","by":"kim","why":"..."}

``amend`` is an audit line (with ``"new"``, the replacing line) plus the new line itself.

A segment takes lines until its serialized data would pass
``shard_bytes`` (512 KiB by default, half of the 1 MiB ConfigMap limit and a third of etcd's
1.5 MiB request limit); then segment n+1 is created and n loses its ``gpuguard.io/ledger-open``
label, so an append reads one small list, not the whole history.

Writes: read the open segment, append, ``replace`` with the read resourceVersion; a 409 (lost
race, or a segment created by someone else first) re-reads and retries, with a bounded,
jittered backoff decided by the pure ``retry_decision``. A line already present is not written
twice, so a retried append is idempotent.

Trust. Reading lists the ConfigMaps labelled ``gpuguard.io/ledger=v1`` but merges only those
with gpuguard's segment names; any other one carrying the labels is reported and ignored (a
hand-kept ledger is imported with ``gpuguard ledger add``). The admission policy
``gpuguard-ledger`` lets only gpuguard's service account create or change those ConfigMaps
(docs/security.md). A malformed line is reported with its object, key and line number and
skipped; the controller's ledger (``quarantine=True``) also moves it under the segment's
``_quarantine`` key (no node is named so), so one bad line never blocks a card's node for good.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from itertools import groupby
from typing import Any, TypeVar

from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from gpuguard.clients import kube as api_errors
from gpuguard.errors import ConflictError, InputError
from gpuguard.model import decisions, faults, pci, timestamps

log = logging.getLogger(__name__)

PART_OF_LABEL = "app.kubernetes.io/part-of"
LEDGER_LABEL = "gpuguard.io/ledger"
MONTH_LABEL = "gpuguard.io/ledger-month"
OPEN_LABEL = "gpuguard.io/ledger-open"
LEDGER_LABELS: Mapping[str, str] = {PART_OF_LABEL: "gpuguard", LEDGER_LABEL: "v1"}
NAME_PREFIX = "gpuguard-ledger-"
CONFIGMAP_LIMIT_BYTES = 1024 * 1024  # the API server rejects a ConfigMap whose data is larger
DEFAULT_SHARD_BYTES = 512 * 1024
MAX_SHARD_BYTES = 768 * 1024  # room left for metadata and JSON framing under the 1 MiB limit
UNKNOWN = "-"

_LINE = re.compile(
    r"^(?P<at>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z) (?P<fault>\S+) (?P<pci>\S+) (?P<uuid>\S+)"
    r" (?P<recorder>\S+)(?: (?P<verdict>\S+))?(?: (?P<confirmation>\S+))?$"
)
_LINE_SHAPE = "'<time>Z <xid-N|kind> <pci|-> <uuid|-> <recorder> [verdict] [confirmation]'"
_AUDIT = re.compile(r"^(?P<at>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z) audit (?P<record>\{.*\})$")
_AUDIT_KEYS = {"op", "target", "new", "by", "why"}
MAX_AUDIT_TEXT = 1000  # "by" and "why" stay readable in one line of `ledger list --audit`
ID_LENGTH = 12  # hex digits: 48 bits, a collision among 100,000 lines is ~1 in 50,000
_XID = re.compile(r"^xid-(?P<code>[1-9]\d{0,3})$")
GPU_UUID = re.compile(
    r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
_DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_E = TypeVar("_E", bound=StrEnum)
_SEGMENT = re.compile(r"^gpuguard-ledger-(?P<month>\d{4}-\d{2})-(?P<segment>\d+)$")
QUARANTINE_KEY = "_quarantine"  # not a node name (no "_" in DNS names): never read as faults


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that could not be read, where it is: ConfigMap name, data key, line text."""

    config_map: str
    key: str
    line: str


class AuditOp(StrEnum):
    REMOVE = "remove"
    AMEND = "amend"


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """A person's correction of one fault line: who, why, when, and (amend) the new line."""

    at: datetime
    node: str
    op: AuditOp
    target: str  # the exact line it removes or replaces, as stored
    by: str
    why: str
    new: str | None = None  # amend only: the line that replaces the target

    @property
    def target_entry(self) -> faults.LedgerEntry:
        return parse_line(self.node, self.target)

    @property
    def new_entry(self) -> faults.LedgerEntry | None:
        return None if self.new is None else parse_line(self.node, self.new)


@dataclass(frozen=True, slots=True)
class LedgerRead:
    """Every well-formed entry (oldest first) and every line that was not, with its place.

    From ``Ledger.entries`` the audit lines are applied: ``entries`` holds what counts and
    ``removed`` what a person removed or replaced; ``audits`` is the trail, oldest first, and
    ``texts`` each entry's line exactly as stored. ``ignored``: ConfigMaps with the ledger
    labels but not gpuguard's names; ``quarantined``: malformed lines moved aside (by this read
    or before)."""

    entries: list[faults.LedgerEntry]
    malformed: list[str] = field(default_factory=list)
    audits: list[AuditRecord] = field(default_factory=list)
    removed: list[faults.LedgerEntry] = field(default_factory=list)
    texts: dict[faults.LedgerEntry, str] = field(default_factory=dict)
    bad_lines: list[BadLine] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)


# --- one line per fault ---------------------------------------------------------------------


def format_line(entry: faults.LedgerEntry) -> str:
    """The entry as one ledger line, time to the second in UTC (the node is not in the line:
    it is the line's data key)."""
    _check_node(entry.node)
    if entry.at.tzinfo is None:
        raise InputError(f"ledger entry for {entry.node}: time {entry.at} has no timezone")
    columns = [
        timestamps.format_utc(entry.at),
        fault_token(entry),
        entry.pci or UNKNOWN,
        entry.uuid or UNKNOWN,
        str(entry.recorder),
    ]
    if entry.verdict is not None:
        columns.append(str(entry.verdict))
    columns.append(str(entry.confirmation))
    return " ".join(columns)


def fault_token(entry: faults.LedgerEntry) -> str:
    """``xid-79`` for an Xid fault, else the fault kind (``fallen_off_bus``)."""
    if entry.xid is not None:
        return f"xid-{entry.xid}"
    if entry.kind is faults.FaultKind.XID:
        raise InputError(f"ledger entry for {entry.node} at {entry.at}: kind xid without a code")
    return str(entry.kind)


def parse_line(node: str, line: str) -> faults.LedgerEntry:
    """One ledger line back into an entry; InputError saying what is wrong with it."""
    match = _LINE.match(line)
    if match is None:
        raise InputError(f"expected {_LINE_SHAPE}")
    xid, kind = parse_fault(match["fault"])
    recorder = _parse_enum(faults.Recorder, match["recorder"], "recorder")
    verdict, confirmation = _parse_tail(match["verdict"], match["confirmation"], recorder)
    return faults.LedgerEntry(
        at=_parse_time(match["at"]),
        node=node,
        xid=xid,
        pci=_parse_pci(match["pci"]),
        uuid=_parse_uuid(match["uuid"]),
        recorder=recorder,
        verdict=verdict,
        kind=kind,
        confirmation=confirmation,
    )


def _parse_tail(
    first: str | None, second: str | None, recorder: faults.Recorder
) -> tuple[decisions.Verdict | None, faults.Confirmation]:
    """The optional verdict and confirmation columns; a line from before the confirmation
    column reads as confirmed (``faults.Confirmation``): by evidence if gpuguard wrote it, by a
    person if a person did."""
    if second is not None:
        return _parse_verdict(first), _parse_enum(faults.Confirmation, second, "confirmation")
    if first in _CONFIRMATIONS:
        return None, faults.Confirmation(first)
    legacy = (
        faults.Confirmation.EVIDENCE
        if recorder is faults.Recorder.GPUGUARD
        else faults.Confirmation.MANUAL
    )
    return _parse_verdict(first), legacy


_CONFIRMATIONS = frozenset(str(c) for c in faults.Confirmation)


def parse_data(name: str, data: Mapping[str, str]) -> LedgerRead:
    """All lines of one ConfigMap's data; blank lines and ``#`` comments are skipped."""
    read = LedgerRead(entries=[])
    for node, text in sorted(data.items()):
        if node == QUARANTINE_KEY:
            read.quarantined.extend(f"ConfigMap {name}: {line}" for line in text.splitlines())
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                _parse_into(read, node, line)
            except InputError as e:
                read.malformed.append(f"ConfigMap {name} key {node} line {number}: {e}: {line!r}")
                read.bad_lines.append(BadLine(name, node, line))
    return read


def _parse_into(read: LedgerRead, node: str, line: str) -> None:
    if is_audit_line(line):
        read.audits.append(parse_audit_line(node, line))
        return
    entry = parse_line(node, line)
    read.entries.append(entry)
    read.texts.setdefault(entry, line)


def quarantined_data(data: Mapping[str, str], bad: Iterable[BadLine]) -> dict[str, str]:
    """``data`` with each bad line moved from its key to ``QUARANTINE_KEY`` as ``key: line``."""
    moved = dict(data)
    for line in bad:
        kept = [text for text in moved.get(line.key, "").splitlines() if text != line.line]
        moved[line.key] = "".join(f"{text}\n" for text in kept)
        moved[QUARANTINE_KEY] = moved.get(QUARANTINE_KEY, "") + f"{line.key}: {line.line}\n"
    return {key: text for key, text in moved.items() if text}


def gpuguards(config_maps: Iterable[ConfigMap]) -> tuple[list[ConfigMap], list[str]]:
    """The ConfigMaps with gpuguard's segment names, and the names of the others."""
    ours: list[ConfigMap] = []
    others: list[str] = []
    for config_map in config_maps:
        if _SEGMENT.match(_name(config_map)):
            ours.append(config_map)
        else:
            others.append(_name(config_map))
    return ours, others


def _check_node(node: str) -> None:
    if not _DATA_KEY.match(node):
        raise InputError(f"node name {node!r} cannot be a ConfigMap key")


def _parse_time(text: str) -> datetime:
    at = timestamps.parse_utc(text)  # the pattern already required ...SSZ
    if at is None:
        raise InputError(f"bad time {text!r}")
    return at


def parse_fault(text: str) -> tuple[int | None, faults.FaultKind]:
    """A fault column (``xid-79``, ``fallen_off_bus``) as its Xid code and kind."""
    match = _XID.match(text)
    if match is not None:
        return int(match["code"]), faults.FaultKind.XID
    kind = _parse_enum(faults.FaultKind, text, "fault")
    if kind is faults.FaultKind.XID:
        raise InputError("fault 'xid' without a code (expected e.g. xid-79)")
    return None, kind


def _parse_pci(text: str) -> str | None:
    if text == UNKNOWN:
        return None
    return pci.normalize_pci(text)


def _parse_uuid(text: str) -> str | None:
    if text == UNKNOWN:
        return None
    if not GPU_UUID.match(text):
        raise InputError(f"bad GPU UUID {text!r} (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxx...)")
    return text


def _parse_verdict(text: str | None) -> decisions.Verdict | None:
    return None if text is None else _parse_enum(decisions.Verdict, text, "verdict")


def _parse_enum(kind: type[_E], text: str, what: str) -> _E:
    try:
        return kind(text)
    except ValueError as e:
        allowed = ", ".join(str(member) for member in kind)
        raise InputError(f"bad {what} {text!r} (one of: {allowed})") from e


# --- audit lines: a person's corrections, applied on reading ----------------------------------


def is_audit_line(line: str) -> bool:
    return line.split(" ", 2)[1:2] == ["audit"]


def format_audit(record: AuditRecord) -> str:
    """The record as one audit line; InputError if it could not be read back."""
    _check_audit(record)
    fields = {"op": str(record.op), "target": record.target}
    if record.new is not None:
        fields["new"] = record.new
    fields |= {"by": record.by, "why": record.why}
    # ASCII only: no character of "why" can split the line (str.splitlines splits on U+2028)
    text = json.dumps(fields, separators=(",", ":"), ensure_ascii=True)
    return f"{timestamps.format_utc(record.at)} audit {text}"


def parse_audit_line(node: str, line: str) -> AuditRecord:
    """One audit line back into its record; InputError saying what is wrong with it."""
    match = _AUDIT.match(line)
    if match is None:
        raise InputError('expected \'<time>Z audit {"op":...,"target":...,"by":...,"why":...}\'')
    try:
        fields = json.loads(match["record"])
    except json.JSONDecodeError as e:
        raise InputError(f"audit record is not JSON: {e}") from e
    if not isinstance(fields, dict) or not set(fields) <= _AUDIT_KEYS:
        raise InputError(f"audit record must be an object with keys {sorted(_AUDIT_KEYS)}")
    if not all(isinstance(value, str) for value in fields.values()):
        raise InputError("audit record values must be strings")
    record = AuditRecord(
        at=_parse_time(match["at"]),
        node=node,
        op=_parse_enum(AuditOp, fields.get("op", ""), "audit op"),
        target=fields.get("target", ""),
        by=fields.get("by", ""),
        why=fields.get("why", ""),
        new=fields.get("new"),
    )
    _check_audit(record)
    return record


def _check_audit(record: AuditRecord) -> None:
    _check_node(record.node)
    if record.at.tzinfo is None:
        raise InputError(f"audit on {record.node}: time {record.at} has no timezone")
    for what, text in (("by", record.by), ("why", record.why)):
        if not text.strip():
            raise InputError(f"audit on {record.node}: {what!r} is empty (say who and why)")
        if len(text) > MAX_AUDIT_TEXT:
            raise InputError(f"audit on {record.node}: {what!r} is over {MAX_AUDIT_TEXT} chars")
    if (record.op is AuditOp.AMEND) != (record.new is not None):
        raise InputError(f"audit on {record.node}: 'new' goes with amend, and only with amend")
    _check_fault_line(record.node, "target", record.target)
    if record.new is not None:
        _check_fault_line(record.node, "new", record.new)


def _check_fault_line(node: str, what: str, text: str) -> None:
    if is_audit_line(text) or len(text.splitlines()) != 1:
        raise InputError(f"audit on {node}: {what} must be one fault line, got {text!r}")
    try:
        parse_line(node, text)
    except InputError as e:
        raise InputError(f"audit on {node}: {what} {text!r}: {e}") from e


def applied(read: LedgerRead) -> LedgerRead:
    """The ledger as it counts: each audit, oldest first, takes its target out and (amend) puts
    its new line back. Nothing is lost: removed entries and the trail come with the result.

    A target removes every stored line equal to it (the same fault written twice is one
    fault); a later amend that names a removed line as its ``new`` line brings it back."""
    audits = sorted(read.audits, key=lambda audit: audit.at)
    live = dict.fromkeys(read.entries, True)
    for audit in audits:
        live[audit.target_entry] = False
        if (new := audit.new_entry) is not None:
            live[new] = True
    return dataclasses.replace(
        read,
        entries=[e for e in read.entries if live[e]],
        audits=audits,
        removed=[e for e in read.entries if not live[e]],
    )


def line_id(entry: faults.LedgerEntry) -> str:
    """A short, stable id for one fault line, shown by ``ledger list`` and accepted by
    ``ledger amend|remove``: the same fault has the same id in the old and new line format."""
    text = f"{entry.node} {format_line(entry)}"
    return hashlib.sha256(text.encode()).hexdigest()[:ID_LENGTH]


@dataclass(frozen=True, slots=True)
class Selector:
    """Which fault line a correction is about: its id, or its node, time and fault."""

    line_id: str | None = None
    node: str | None = None
    at: datetime | None = None
    xid: int | None = None
    kind: faults.FaultKind | None = None

    def __str__(self) -> str:
        if self.line_id is not None:
            return f"id {self.line_id}"
        when = timestamps.format_utc(self.at) if self.at else "?"
        fault = f"xid-{self.xid}" if self.xid is not None else str(self.kind)
        return f"{self.node} {when} {fault}"


def matching(entries: Iterable[faults.LedgerEntry], selector: Selector) -> list[faults.LedgerEntry]:
    """The distinct entries ``selector`` names (the same fault stored twice is one), in order."""
    if selector.line_id is not None:
        wanted = selector.line_id.lower()
        return list(dict.fromkeys(e for e in entries if line_id(e) == wanted))
    return list(
        dict.fromkeys(
            e
            for e in entries
            if e.node == selector.node
            and e.at == selector.at
            and (e.xid, e.kind) == (selector.xid, selector.kind)
        )
    )


# --- size -----------------------------------------------------------------------------------


def data_bytes(data: Mapping[str, str]) -> int:
    """Size of a ConfigMap's ``data`` as the API server receives it (compact JSON, UTF-8)."""
    return len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())


def month_of(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m")


def shard_name(month: str, segment: int) -> str:
    return f"{NAME_PREFIX}{month}-{segment}"


Line = tuple[str, str]  # (node, line)


@dataclass(frozen=True, slots=True)
class Filled:
    """The result of fitting lines into one segment's data: the new data and what is left."""

    data: dict[str, str]
    added: int
    rest: list[Line]


def fill(data: Mapping[str, str], pending: Sequence[Line], cap_bytes: int) -> Filled:
    """Append ``pending`` lines to ``data`` in order while its serialized size stays within
    ``cap_bytes``; a line already present (in ``data`` or earlier in ``pending``) is skipped."""
    size = data_bytes(data)
    present: dict[str, set[str]] = {}
    added: dict[str, list[str]] = {}
    for index, (node, line) in enumerate(pending):
        seen = present.setdefault(node, set(data.get(node, "").splitlines()))
        if line in seen:
            continue
        cost = _added_bytes(node, line, node in data or node in added)
        if size + cost > cap_bytes:
            return Filled(_merged(data, added), _count(added), list(pending[index:]))
        seen.add(line)
        added.setdefault(node, []).append(line)
        size += cost
    return Filled(_merged(data, added), _count(added), [])


def _added_bytes(node: str, line: str, key_exists: bool) -> int:
    value = len(json.dumps(line + "\n", ensure_ascii=False).encode()) - 2  # less the quotes
    if key_exists:
        return value
    return len(json.dumps(node, ensure_ascii=False).encode()) + len(':"",') + value


def _merged(data: Mapping[str, str], added: Mapping[str, list[str]]) -> dict[str, str]:
    merged = dict(data)
    for node, lines in added.items():
        merged[node] = merged.get(node, "") + "".join(f"{line}\n" for line in lines)
    return merged


def _count(added: Mapping[str, list[str]]) -> int:
    return sum(len(lines) for lines in added.values())


# --- retries --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard an append tries after losing resourceVersion races (full-jitter backoff)."""

    attempts: int = 20
    base_s: float = 0.01
    cap_s: float = 0.5


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry: bool
    delay_s: float = 0.0
    why: str = ""


def retry_decision(
    error: Exception, attempt: int, *, jitter: float, policy: RetryPolicy = RetryPolicy()
) -> RetryDecision:
    """Whether to re-read and try again after ``attempt`` failed tries, and after how long.

    Only a conflict (409: a stale resourceVersion, or a segment someone else created first)
    is worth retrying: re-reading resolves it. ``jitter`` in [0, 1) spreads the writers out.
    """
    if not isinstance(error, ConflictError):
        return RetryDecision(retry=False, why=f"not a conflict: {error}")
    if attempt >= policy.attempts:
        return RetryDecision(retry=False, why=f"still conflicting after {attempt} tries")
    ceiling = min(policy.cap_s, policy.base_s * 2**attempt)
    return RetryDecision(retry=True, delay_s=jitter * ceiling, why="conflict: re-read and retry")


# --- storage --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Segment:
    number: int
    config_map: ConfigMap


class Ledger:
    """The fault ledger in ConfigMaps of ``namespace``; see the module docstring for layout."""

    def __init__(
        self,
        client: Client,
        namespace: str = "gpuguard",
        *,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
        quarantine: bool = False,
    ) -> None:
        if not 1024 <= shard_bytes <= MAX_SHARD_BYTES:
            raise InputError(f"shard_bytes={shard_bytes}: must be 1024..{MAX_SHARD_BYTES}")
        self._client = client
        self._namespace = namespace
        self._shard_bytes = shard_bytes
        self._retry = retry
        self._sleep = sleep
        self._jitter = jitter
        self._quarantine = quarantine

    def append(self, entry: faults.LedgerEntry) -> None:
        """Record one fault; idempotent (the same line twice is stored once)."""
        self.append_many([entry])

    def append_many(self, entries: Iterable[faults.LedgerEntry]) -> None:
        """Record many faults, filling segments in bulk (a back-fill, an import).

        Every entry is formatted before anything is written, so a bad one writes nothing.
        """
        self._append_lines([(e.at, e.node, format_line(e)) for e in entries])

    def record_audit(self, record: AuditRecord) -> None:
        """Record a person's correction: the audit line in the segment of the month of the
        line it corrects (a month's segments keep their own corrections), and for amend the
        new line in its month (one write when the months are the same); idempotent."""
        lines = [(record.target_entry.at, record.node, format_audit(record))]
        new = record.new_entry
        if new is not None:
            lines.append((new.at, new.node, format_line(new)))
        self._append_lines(lines)

    def _append_lines(self, lines: Iterable[tuple[datetime, str, str]]) -> None:
        dated = sorted((month_of(at), node, line) for at, node, line in lines)
        for month, group in groupby(dated, key=lambda item: item[0]):
            self._append_month(month, [(node, line) for _, node, line in group])

    def entries(self) -> LedgerRead:
        """gpuguard's ledger ConfigMaps merged, oldest entry first, with the malformed lines
        (moved to quarantine first when this ledger quarantines), and the audit lines applied
        (``applied``)."""
        ours, ignored = gpuguards(self._list(LEDGER_LABELS))
        merged = LedgerRead(entries=[], ignored=ignored)
        for config_map in ours:
            read = parse_data(_name(config_map), config_map.data or {})
            if read.bad_lines and self._quarantine and self._quarantined(config_map, read):
                read = parse_data(_name(config_map), config_map.data or {})
            merged.entries.extend(read.entries)
            merged.malformed.extend(read.malformed)
            merged.audits.extend(read.audits)
            merged.texts.update({k: v for k, v in read.texts.items() if k not in merged.texts})
            merged.bad_lines.extend(read.bad_lines)
            merged.quarantined.extend(read.quarantined)
        merged.entries.sort(key=_entry_order)
        return applied(merged)

    def _quarantined(self, config_map: ConfigMap, read: LedgerRead) -> bool:
        """Move the segment's bad lines aside; False when the write lost a race (next read)."""
        try:
            self._replace(config_map, quarantined_data(config_map.data or {}, read.bad_lines))
        except ConflictError:
            return False
        for problem in read.malformed:
            log.warning("ledger: malformed line moved to %s: %s", QUARANTINE_KEY, problem)
        return True

    def _append_month(self, month: str, pending: list[Line]) -> None:
        failures = 0
        while pending:
            try:
                pending = self._write_once(month, pending)
                failures = 0
            except ConflictError as e:
                failures += 1
                decision = retry_decision(e, failures, jitter=self._jitter(), policy=self._retry)
                if not decision.retry:
                    raise ConflictError(f"ledger month {month}: {decision.why}") from e
                self._sleep(decision.delay_s)

    def _write_once(self, month: str, pending: list[Line]) -> list[Line]:
        """One write (a replace or a create); returns the lines still to write."""
        newest = self._open_segment(month)
        if newest is None:
            return self._create(month, 0, pending)
        filled = fill(newest.config_map.data or {}, pending, self._shard_bytes)
        if filled.added:
            self._replace(newest.config_map, filled.data)
            return filled.rest
        if not filled.rest:  # every line was already there: a retried append
            return []
        rest = self._create(month, newest.number + 1, filled.rest)
        self._seal(newest.config_map)
        return rest

    def _open_segment(self, month: str) -> _Segment | None:
        """The newest segment of the month; older segments still marked open are sealed."""
        month_labels = {**LEDGER_LABELS, MONTH_LABEL: month}
        segments = _segments(self._list({**month_labels, OPEN_LABEL: "true"}))
        if not segments:
            segments = _segments(self._list(month_labels))
        if not segments:
            return None
        *older, newest = segments
        for segment in older:
            self._seal(segment.config_map)
        return newest

    def _create(self, month: str, number: int, pending: list[Line]) -> list[Line]:
        filled = fill({}, pending, self._shard_bytes)
        if not filled.added:
            raise InputError(f"ledger line {pending[0][1]!r} is larger than {self._shard_bytes} B")
        name = shard_name(month, number)
        labels = {**LEDGER_LABELS, MONTH_LABEL: month, OPEN_LABEL: "true"}
        config_map = ConfigMap(
            metadata=ObjectMeta(name=name, namespace=self._namespace, labels=labels),
            data=filled.data,
        )
        with api_errors.translated(f"creating ConfigMap {self._namespace}/{name}"):
            self._client.create(config_map, namespace=self._namespace)
        return filled.rest

    def _replace(self, config_map: ConfigMap, data: dict[str, str]) -> None:
        """Write ``data`` guarded by the resourceVersion the object was read at."""
        config_map.data = data
        with api_errors.translated(f"replacing ConfigMap {self._namespace}/{_name(config_map)}"):
            self._client.replace(config_map)

    def _seal(self, config_map: ConfigMap) -> None:
        """Best effort: a lost race leaves the segment open, and the next writer seals it."""
        labels = dict(config_map.metadata.labels or {}) if config_map.metadata else {}
        labels.pop(OPEN_LABEL, None)
        if config_map.metadata is not None:
            config_map.metadata.labels = labels
        try:
            with api_errors.translated(f"sealing ConfigMap {self._namespace}/{_name(config_map)}"):
                self._client.replace(config_map)
        except ConflictError:
            pass

    def _list(self, labels: Mapping[str, str]) -> list[ConfigMap]:
        with api_errors.translated(f"listing ledger ConfigMaps in {self._namespace}"):
            selector: dict[str, Any] = dict(labels)
            return list(self._client.list(ConfigMap, namespace=self._namespace, labels=selector))


def _segments(config_maps: Iterable[ConfigMap]) -> list[_Segment]:
    """The month segments among ``config_maps``, oldest first (other names are not ours)."""
    found = []
    for config_map in config_maps:
        match = _SEGMENT.match(_name(config_map))
        if match is not None:
            found.append(_Segment(int(match["segment"]), config_map))
    return sorted(found, key=lambda segment: segment.number)


def _name(config_map: ConfigMap) -> str:
    return (config_map.metadata.name if config_map.metadata else None) or "?"


def _entry_order(entry: faults.LedgerEntry) -> tuple[datetime, str, str, str]:
    return entry.at, entry.node, entry.pci or "", entry.uuid or ""


