"""The fault ledger stored in Kubernetes ConfigMaps: no database, safe with concurrent writers,
never near an object size limit.

Layout. One ConfigMap per month and segment, ``gpuguard-ledger-<YYYY-MM>-<n>`` in gpuguard's
namespace, labelled ``app.kubernetes.io/part-of=gpuguard``, ``gpuguard.io/ledger=v1`` and
``gpuguard.io/ledger-month=<YYYY-MM>``. As in seed 004's ``gpu-fault-ledger``, each data key is
a node name and its value holds one line per fault::

    2026-09-10T13:03:59Z xid-79 0000:99:00.0 GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d manual

(time UTC, ``xid-<code>`` or the fault kind, PCI slot, card UUID, recorder, optional verdict;
``-`` for an unknown slot or card). A segment takes lines until its serialized data would pass
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

from gpuguard.actuators import api_errors
from gpuguard.errors import ConflictError, InputError
from gpuguard.model import decisions, faults, pci

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

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_LINE = re.compile(
    r"^(?P<at>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z) (?P<fault>\S+) (?P<pci>\S+) (?P<uuid>\S+)"
    r" (?P<recorder>\S+)(?: (?P<verdict>\S+))?$"
)
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


@dataclass(frozen=True, slots=True)
class LedgerRead:
    """Every well-formed entry (oldest first) and every line that was not, with its place;
    ``ignored``: ConfigMaps with the ledger labels but not gpuguard's names; ``quarantined``:
    malformed lines moved aside (by this read or before)."""

    entries: list[faults.LedgerEntry]
    malformed: list[str] = field(default_factory=list)
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
        entry.at.astimezone(UTC).strftime(_TIME_FORMAT),
        fault_token(entry),
        entry.pci or UNKNOWN,
        entry.uuid or UNKNOWN,
        str(entry.recorder),
    ]
    if entry.verdict is not None:
        columns.append(str(entry.verdict))
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
        raise InputError("expected '<time>Z <xid-N|kind> <pci|-> <uuid|-> <recorder> [verdict]'")
    xid, kind = _parse_fault(match["fault"])
    return faults.LedgerEntry(
        at=_parse_time(match["at"]),
        node=node,
        xid=xid,
        pci=_parse_pci(match["pci"]),
        uuid=_parse_uuid(match["uuid"]),
        recorder=_parse_enum(faults.Recorder, match["recorder"], "recorder"),
        verdict=_parse_verdict(match["verdict"]),
        kind=kind,
    )


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
                read.entries.append(parse_line(node, line))
            except InputError as e:
                read.malformed.append(f"ConfigMap {name} key {node} line {number}: {e}: {line!r}")
                read.bad_lines.append(BadLine(name, node, line))
    return read


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
    try:
        return datetime.fromisoformat(text)  # the pattern already required ...SSZ
    except ValueError as e:
        raise InputError(f"bad time {text!r}") from e


def _parse_fault(text: str) -> tuple[int | None, faults.FaultKind]:
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
        dated = sorted((month_of(e.at), e.node, format_line(e)) for e in entries)
        for month, group in groupby(dated, key=lambda item: item[0]):
            self._append_month(month, [(node, line) for _, node, line in group])

    def entries(self) -> LedgerRead:
        """gpuguard's ledger ConfigMaps merged, oldest entry first, with the malformed lines
        (moved to quarantine first when this ledger quarantines)."""
        ours, ignored = gpuguards(self._list(LEDGER_LABELS))
        merged = LedgerRead(entries=[], ignored=ignored)
        for config_map in ours:
            read = parse_data(_name(config_map), config_map.data or {})
            if read.bad_lines and self._quarantine and self._quarantined(config_map, read):
                read = parse_data(_name(config_map), config_map.data or {})
            merged.entries.extend(read.entries)
            merged.malformed.extend(read.malformed)
            merged.bad_lines.extend(read.bad_lines)
            merged.quarantined.extend(read.quarantined)
        merged.entries.sort(key=_entry_order)
        return merged

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


