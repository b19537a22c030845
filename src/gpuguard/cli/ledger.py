"""``gpuguard ledger``: read, back-fill, correct and export the per-card fault ledger kept in
ConfigMaps of gpuguard's namespace (layout and line format: ``gpuguard.actuators.ledger``).

A correction never deletes: ``amend`` and ``remove`` write an audit line saying who and why,
and every reader applies it (docs/ledger.md)."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuguard.actuators import ledger as ledger_store
from gpuguard.catalog import xid as xid_catalog
from gpuguard.cli import guard, inputs, output, safe_text
from gpuguard.controller import wiring
from gpuguard.errors import ConflictError, GpuguardError, InputError, NotFoundError
from gpuguard.model import decisions, faults, pci, timestamps
from gpuguard.model import settings as settings_model
from gpuguard.policy import escalation
from gpuguard.sources import kubernetes

app = typer.Typer(
    help=(
        "The fault ledger: one line per GPU fault (when it happened, node, Xid, PCI slot, card "
        "UUID, how it was confirmed), kept in ConfigMaps of gpuguard's namespace. A card's "
        "confirmed faults are counted by UUID across nodes: 2nd fault -> inspection, 3rd -> "
        "replacement; two cards failing in one slot -> riser/slot/power check. Corrections "
        "(amend, remove) are audit lines with who and why, never deletions."
    ),
    no_args_is_help=True,
)

NamespaceOpt = Annotated[
    str | None,
    typer.Option("--namespace", "-n", parser=inputs.namespace,
                 help="Where the ledger lives (default: from settings)."),
]
NodeFilter = Annotated[
    str | None, typer.Option("--node", parser=inputs.node_name, help="Only faults on this node.")
]
UuidFilter = Annotated[str | None, typer.Option("--uuid", help="Only faults of this card.")]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force", help="Record a user-class Xid, or a node the cluster does not have (any more)."
    ),
]
WhyOpt = Annotated[
    str, typer.Option("--why", help="Why: kept in the ledger's audit line, for the next person.")
]
ByOpt = Annotated[
    str | None,
    typer.Option("--by", help="Who (default: the kubeconfig user, else $USER)."),
]
IdOpt = Annotated[
    str | None, typer.Option("--id", help="The line's id, as `gpuguard ledger list` shows it.")
]
SelectNodeOpt = Annotated[
    str | None,
    typer.Option("--node", parser=inputs.node_name, help="With --at and --fault: the line's node."),
]
SelectAtOpt = Annotated[
    str | None, typer.Option("--at", help="With --node and --fault: the line's time (ISO).")
]
SelectFaultOpt = Annotated[
    str | None,
    typer.Option("--fault", help="With --node and --at: the line's fault, xid-79 or a kind."),
]


class ExportFormat(StrEnum):
    CSV = "csv"
    JSON = "json"
    YAML = "yaml"


EXPORT_COLUMNS = (
    "at", "node", "fault", "xid", "pci", "uuid", "recorder", "verdict", "confirmation", "id",
    "record", "op", "by", "why", "target", "new",
)  # fmt: skip


@contextlib.contextmanager
def _connected(
    settings: settings_model.GuardSettings,
    kubeconfig: Path | None,
    server: str | None,
    namespace: str | None,
) -> Iterator[tuple[ledger_store.Ledger, kubernetes.KubernetesReader]]:
    """The ledger over a lightkube client; an API failure raises, naming the API server
    (exit 1, one line)."""
    with wiring.kube_client(guard.connection(kubeconfig, server, None)) as client:
        ledger = ledger_store.Ledger(client, namespace or settings.controller.namespace)
        try:
            yield ledger, kubernetes.KubernetesReader(client)
        except (InputError, ConflictError, NotFoundError):
            raise
        except GpuguardError as e:
            where = server or kubeconfig or "the default kubeconfig"
            raise type(e)(f"{e} (API server: {where})") from e


@contextlib.contextmanager
def _opened(
    config: Path | None, kubeconfig: Path | None, server: str | None, namespace: str | None
) -> Iterator[ledger_store.Ledger]:
    with _connected(guard.load_settings(config), kubeconfig, server, namespace) as (store, _):
        yield store


def _refuse(message: str) -> typer.Exit:
    """One line on stderr; the caller raises the returned exit 2."""
    output.error_line(message)
    return typer.Exit(2)


def _read(store: ledger_store.Ledger) -> ledger_store.LedgerRead:
    """The ledger with its audit lines applied; each malformed line is a warning on stderr
    naming object, key and line."""
    read = store.entries()
    for problem in read.malformed:
        output.errors.print(f"warning: skipped malformed line: {problem}")
    for name in read.ignored:
        output.errors.print(
            f"warning: ignored ConfigMap {name}: it carries the ledger labels but not a "
            "gpuguard-ledger-<YYYY-MM>-<n> name (import it with `gpuguard ledger add`)"
        )
    return read


def _utc(at: datetime) -> str:
    return timestamps.format_utc(at)


def _row(entry: faults.LedgerEntry) -> dict[str, Any]:
    return {
        "at": _utc(entry.at),
        "node": entry.node,
        "fault": ledger_store.fault_token(entry),
        "xid": entry.xid,
        "pci": entry.pci,
        "uuid": entry.uuid,
        "recorder": str(entry.recorder),
        "verdict": str(entry.verdict) if entry.verdict else None,
        "confirmation": str(entry.confirmation),
        "id": ledger_store.line_id(entry),
    }


def _audit_row(audit: ledger_store.AuditRecord) -> dict[str, Any]:
    return {
        "at": _utc(audit.at),
        "node": audit.node,
        "op": str(audit.op),
        "by": audit.by,
        "why": audit.why,
        "target": audit.target,
        "new": audit.new,
    }


def ledger_list(
    node: NodeFilter = None,
    uuid: UuidFilter = None,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    namespace: NamespaceOpt = None,
    fmt: guard.FormatOpt = output.Format.TABLE,
    audit: Annotated[
        bool, typer.Option("--audit", help="Show the audit trail (amend, remove) instead.")
    ] = False,
) -> None:
    """List recorded faults, oldest first, each with the time the fault happened (``at``,
    docs/ledger.md#the-lines-time), its id (for amend and remove), how it was confirmed, and
    how many confirmed faults its card has in total (what escalation counts); lines a person
    removed are not listed: ``--audit`` shows who removed or amended what, and why.

    Examples:

      gpuguard ledger list --node gpu-node-b

      gpuguard ledger list --uuid GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d -o json

      gpuguard ledger list --audit
    """
    with _opened(config, kubeconfig, kube_server, namespace) as store:
        read = _read(store)
    if audit:
        _list_audits(read.audits, node, fmt)
        return
    per_card = escalation.card_fault_counts(read.entries)
    rows = [
        {**_row(e), "card_faults": per_card[e.uuid] if e.uuid else None}
        for e in read.entries
        if (node is None or e.node == node) and (uuid is None or e.uuid == uuid)
    ]
    if not output.emit(rows, fmt):
        columns = ("id", "at", "node", "fault", "pci", "uuid", "recorder", "verdict",
                   "confirmation", "card_faults")  # fmt: skip
        cells = [[_cell(r[c]) for c in columns] for r in rows]
        output.table(f"fault ledger: {len(rows)} of {len(read.entries)}", columns, cells)


def _list_audits(
    audits: list[ledger_store.AuditRecord], node: str | None, fmt: output.Format
) -> None:
    rows = [_audit_row(a) for a in audits if node is None or a.node == node]
    if not output.emit(rows, fmt):
        columns = ("at", "node", "op", "by", "why", "target", "new")
        cells = [[_cell(r[c]) for c in columns] for r in rows]
        output.table(f"ledger audit trail: {len(rows)} of {len(audits)}", columns, cells)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _check_uuid(uuid: str) -> str:
    if not ledger_store.GPU_UUID.match(uuid):
        raise typer.BadParameter(
            f"{uuid!r} is not a GPU UUID (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
            param_hint="--uuid",
        )
    return uuid


def _check_pci(text: str) -> str:
    try:
        return pci.normalize_pci(text)
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="--pci") from e


def _check_at(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC).replace(microsecond=0)
    try:
        at = datetime.fromisoformat(text)
    except ValueError as e:
        raise typer.BadParameter(f"{text!r} is not an ISO time", param_hint="--at") from e
    if at.tzinfo is None:
        raise typer.BadParameter(
            f"{text!r} has no timezone (e.g. 2026-09-10T13:03:59Z)", param_hint="--at"
        )
    return at.astimezone(UTC)


def ledger_add(
    node: Annotated[str, typer.Option(
        "--node", parser=inputs.node_name, help="The node the fault happened on.")],
    xid: Annotated[int, typer.Option("--xid", min=1, max=9999, help="The Xid code, e.g. 79.")],
    pci_address: Annotated[str, typer.Option("--pci", help="PCI slot, e.g. 0000:99:00.0.")],
    uuid: Annotated[str, typer.Option("--uuid", help="Card UUID, GPU-xxxxxxxx-xxxx-...")],
    at: Annotated[
        str | None, typer.Option("--at", help="When, ISO with timezone (default: now).")
    ] = None,
    verdict: Annotated[
        decisions.Verdict | None, typer.Option("--verdict", help="The repair it needed.")
    ] = None,
    force: ForceOpt = False,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    namespace: NamespaceOpt = None,
) -> None:
    """Back-fill one fault by hand (recorder ``manual``, confirmed by a person), then print
    the request the guard would draft for it now, with the card's and the slot's history.

    Refused (exit 2, one line): a time in the future; a user-class Xid (the application
    caused it, not the card; the cluster's Xid overrides apply) and a node the cluster does
    not have, both unless ``--force``.

    Example (the incident's first Xid 79 in gpu-node-b's slot 0000:99:00.0):

      gpuguard ledger add --node gpu-node-b --xid 79 --pci 0000:99:00.0 \\
      --uuid GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d --at 2026-09-10T13:03:59Z
    """
    entry = faults.LedgerEntry(
        at=_check_at(at),
        node=node,
        xid=xid,
        pci=_check_pci(pci_address),
        uuid=_check_uuid(uuid),
        recorder=faults.Recorder.MANUAL,
        verdict=verdict,
        confirmation=faults.Confirmation.MANUAL,
    )
    try:
        line = ledger_store.format_line(entry)
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="--node") from e
    settings = guard.load_settings(config)
    _check_recordable(entry, settings, force=force)
    with _connected(settings, kubeconfig, kube_server, namespace) as (store, reader):
        _check_node_known(reader, node, force=force)
        store.append(entry)
        entries = _read(store).entries
    output.line(f"recorded on {node}: {line}\n{_drafted(entry, entries)}")


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _check_recordable(
    entry: faults.LedgerEntry, settings: settings_model.GuardSettings, *, force: bool
) -> None:
    """A fault that happened, of the card: not in the future, not a user-class Xid."""
    now = _now()
    if entry.at > now:
        raise _refuse(
            f"--at {_utc(entry.at)} is in the future (now {_utc(now)}): "
            "the ledger records faults that happened"
        )
    if entry.xid is None or force:
        return
    try:
        catalog = xid_catalog.load_catalog(settings.controller.xid_overrides)
    except InputError as e:
        raise _refuse(str(e)) from e
    if catalog.is_user(entry.xid):
        raise _refuse(
            f"Xid {entry.xid} ({catalog.entry(entry.xid).name}) is a user-class Xid: the "
            "application caused it, not the card, and a ledger line would count towards the "
            "card's inspection and replacement; --force records it anyway"
        )


def _check_node_known(reader: kubernetes.KubernetesReader, node: str, *, force: bool) -> None:
    if force or reader.has_node(node):
        return
    raise _refuse(
        f"node {node} is not in the cluster: check the name (kubectl get nodes), "
        "or --force for a node that has left it"
    )


def ledger_remove(
    why: WhyOpt,
    line_id: IdOpt = None,
    node: SelectNodeOpt = None,
    at: SelectAtOpt = None,
    fault: SelectFaultOpt = None,
    by: ByOpt = None,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    namespace: NamespaceOpt = None,
) -> None:
    """Take a wrong line out of every count, keeping it and who removed it and why in an
    audit line (``gpuguard ledger list --audit``). Choose the line by its id, or by node,
    time and fault.

    Examples:

      gpuguard ledger remove --id 3f2a9c01b7de --why "Xid 13 came from a user's kernel"

      gpuguard ledger remove --node gpu-node-b --at 2026-09-21T05:52:44Z --fault xid-13 \\
      --why "recorded on the wrong node" --by kim
    """
    selector = _selector(line_id, node, at, fault)
    who = _who(by, why, kubeconfig, kube_server)
    settings = guard.load_settings(config)
    with _connected(settings, kubeconfig, kube_server, namespace) as (store, _):
        read = _read(store)
        target = _selected(read, selector)
        record = _audit(read, target, ledger_store.AuditOp.REMOVE, who, why)
        store.record_audit(record)
        entries = _read(store).entries
    output.line(
        f"removed from {target.node} by {who}: {record.target}\n{_card_count(target, entries)}"
        .removesuffix("\n")
    )


def ledger_amend(
    why: WhyOpt,
    line_id: IdOpt = None,
    node: SelectNodeOpt = None,
    at: SelectAtOpt = None,
    fault: SelectFaultOpt = None,
    set_at: Annotated[str | None, typer.Option("--set-at", help="The right time.")] = None,
    set_fault: Annotated[
        str | None, typer.Option("--set-fault", help="The right fault: xid-79 or a kind.")
    ] = None,
    set_pci: Annotated[
        str | None, typer.Option("--set-pci", help="The right PCI slot ('-': unknown).")
    ] = None,
    set_uuid: Annotated[
        str | None, typer.Option("--set-uuid", help="The right card UUID ('-': unknown).")
    ] = None,
    set_verdict: Annotated[
        decisions.Verdict | None, typer.Option("--set-verdict", help="The right verdict.")
    ] = None,
    set_confirmation: Annotated[
        faults.Confirmation | None,
        typer.Option("--set-confirmation", help="How the fault was confirmed (or observed)."),
    ] = None,
    by: ByOpt = None,
    force: ForceOpt = False,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    namespace: NamespaceOpt = None,
) -> None:
    """Correct one line: the corrected line replaces it in every count, and an audit line
    keeps the old one, who changed it and why (``gpuguard ledger list --audit``). Choose the
    line by its id, or by node, time and fault; the corrected line is checked as ``add``
    checks a new one.

    Examples:

      gpuguard ledger amend --id 3f2a9c01b7de --set-verdict rma --why "vendor confirmed RMA"

      gpuguard ledger amend --node gpu-node-b --at 2026-09-21T05:52:44Z --fault xid-79 \\
      --set-uuid GPU-2b3c4d5e-6f7a-8b9c-0d1e-2f3a4b5c6d7e --why "the card was swapped on 09-15"
    """
    selector = _selector(line_id, node, at, fault)
    changes = _changes(set_at, set_fault, set_pci, set_uuid, set_verdict, set_confirmation)
    who = _who(by, why, kubeconfig, kube_server)
    settings = guard.load_settings(config)
    with _connected(settings, kubeconfig, kube_server, namespace) as (store, _):
        read = _read(store)
        target = _selected(read, selector)
        new = dataclasses.replace(target, **changes)
        if new == target:
            raise _refuse(f"nothing to change: the line already reads {record_text(read, new)}")
        _check_recordable(new, settings, force=force)
        record = _audit(read, target, ledger_store.AuditOp.AMEND, who, why, new=new)
        store.record_audit(record)
        entries = _read(store).entries
    output.line(
        f"amended on {target.node} by {who}:\n  was: {record.target}\n  now: {record.new}\n"
        f"{_card_count(new, entries)}".removesuffix("\n")
    )


def record_text(read: ledger_store.LedgerRead, entry: faults.LedgerEntry) -> str:
    """The entry's line exactly as stored (as formatted now, if it is not stored)."""
    return read.texts.get(entry) or ledger_store.format_line(entry)


def _selector(
    line_id: str | None, node: str | None, at: str | None, fault: str | None
) -> ledger_store.Selector:
    by_place = (node, at, fault)
    if (line_id is None) == all(part is None for part in by_place):
        raise _refuse("choose the line with --id, or with --node, --at and --fault (not both)")
    if line_id is not None:
        return ledger_store.Selector(line_id=line_id)
    if node is None or at is None or fault is None:
        raise _refuse("--node, --at and --fault go together: all three choose one line")
    try:
        xid, kind = ledger_store.parse_fault(fault)
    except InputError as e:
        raise _refuse(f"--fault {fault}: {e}") from e
    return ledger_store.Selector(node=node, at=_check_at(at), xid=xid, kind=kind)


def _selected(
    read: ledger_store.LedgerRead, selector: ledger_store.Selector
) -> faults.LedgerEntry:
    found = ledger_store.matching(read.entries, selector)
    if len(found) == 1:
        return found[0]
    if found:
        choices = "; ".join(
            f"{ledger_store.line_id(e)} ({e.node}: {record_text(read, e)})" for e in found
        )
        raise _refuse(f"{len(found)} lines match {selector}: choose one with --id: {choices}")
    if ledger_store.matching(read.removed, selector):
        raise _refuse(f"the line {selector} was already removed or amended: see list --audit")
    raise _refuse(f"no fault line matches {selector}: see gpuguard ledger list")


def _changes(
    at: str | None,
    fault: str | None,
    pci_address: str | None,
    uuid: str | None,
    verdict: decisions.Verdict | None,
    confirmation: faults.Confirmation | None,
) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if at is not None:
        changes["at"] = _check_at(at)
    if fault is not None:
        try:
            changes["xid"], changes["kind"] = ledger_store.parse_fault(fault)
        except InputError as e:
            raise typer.BadParameter(str(e), param_hint="--set-fault") from e
    if pci_address is not None:
        changes["pci"] = None if pci_address == ledger_store.UNKNOWN else _check_pci(pci_address)
    if uuid is not None:
        changes["uuid"] = None if uuid == ledger_store.UNKNOWN else _check_uuid(uuid)
    if verdict is not None:
        changes["verdict"] = verdict
    if confirmation is not None:
        changes["confirmation"] = confirmation
    if not changes:
        raise _refuse("say what to correct: --set-at, --set-fault, --set-pci, --set-uuid, "
                      "--set-verdict or --set-confirmation")
    return changes


def _who(by: str | None, why: str, kubeconfig: Path | None, server: str | None) -> str:
    """Who makes the correction: --by, else the kubeconfig's user, else $USER."""
    if not why.strip():
        raise _refuse("--why is empty: say why, for the next person who reads the ledger")
    if by is not None:
        if not by.strip():
            raise _refuse("--by is empty: say who")
        return by
    who = (None if server else wiring.kubeconfig_user(kubeconfig)) or os.environ.get("USER")
    if not who:
        raise _refuse("cannot tell who you are: say it with --by")
    return who


def _audit(
    read: ledger_store.LedgerRead,
    target: faults.LedgerEntry,
    op: ledger_store.AuditOp,
    who: str,
    why: str,
    *,
    new: faults.LedgerEntry | None = None,
) -> ledger_store.AuditRecord:
    record = ledger_store.AuditRecord(
        at=_now(),
        node=target.node,
        op=op,
        target=record_text(read, target),
        by=who,
        why=why,
        new=None if new is None else ledger_store.format_line(new),
    )
    try:
        ledger_store.format_audit(record)
    except InputError as e:
        raise _refuse(str(e)) from e
    return record


def _card_count(entry: faults.LedgerEntry, entries: list[faults.LedgerEntry]) -> str:
    if entry.uuid is None:
        return ""
    count = escalation.card_fault_count(entries, entry.uuid)
    return f"card {entry.uuid}: {count} confirmed fault(s) now counted\n"


def _drafted(entry: faults.LedgerEntry, entries: list[faults.LedgerEntry]) -> str:
    history = escalation.history_for(entries, entry.uuid, entry.node, entry.pci)
    level = escalation.escalate(history)
    verdict = entry.verdict or xid_catalog.default_verdict(entry.xid or 0)
    text = escalation.request_text(entry, verdict, history, level)
    return f"escalation: {level}\nrequest: {text}"


def ledger_export(
    fmt: Annotated[
        ExportFormat,
        typer.Option("--output", "-o", "--format", "-f", help="csv (with a header), json or yaml."),
    ] = ExportFormat.CSV,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    namespace: NamespaceOpt = None,
) -> None:
    """Write every recorded fault to stdout, oldest first, for spreadsheets and archives,
    then the audit trail (``record`` is ``fault`` or ``audit``; a removed or replaced line is
    in its audit row's ``target``).

    Examples:

      gpuguard ledger export -o csv > ledger.csv

      gpuguard ledger export -o json | jq '.[] | select(.xid == 79)'
    """
    with _opened(config, kubeconfig, kube_server, namespace) as store:
        read = _read(store)
    rows = [{**_row(e), "record": "fault"} for e in read.entries]
    rows += [{**_audit_row(a), "record": "audit"} for a in read.audits]
    rows = [{column: row.get(column) for column in EXPORT_COLUMNS} for row in rows]
    if fmt is not ExportFormat.CSV:
        output.emit(rows, output.Format(fmt.value))
        return
    writer = csv.DictWriter(sys.stdout, fieldnames=EXPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: safe_text.csv_cell(v) for k, v in r.items()} for r in rows)


app.command("list")(ledger_list)
app.command("add")(ledger_add)
app.command("amend")(ledger_amend)
app.command("remove")(ledger_remove)
app.command("export")(ledger_export)
