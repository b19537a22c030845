"""``gpuguard ledger``: read, back-fill and export the per-card fault ledger kept in
ConfigMaps of gpuguard's namespace (layout and line format: ``gpuguard.actuators.ledger``)."""

from __future__ import annotations

import collections
import contextlib
import csv
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import markup

from gpuguard.actuators import ledger as ledger_store
from gpuguard.catalog import xid as xid_catalog
from gpuguard.cli import guard, output
from gpuguard.controller import wiring
from gpuguard.errors import GpuguardError, InputError
from gpuguard.model import decisions, faults, pci
from gpuguard.policy import escalation

app = typer.Typer(
    help=(
        "The fault ledger: one line per GPU fault (time, node, Xid, PCI slot, card UUID), "
        "kept in ConfigMaps of gpuguard's namespace. A card's faults are counted by UUID "
        "across nodes: 2nd fault -> inspection, 3rd -> replacement; two cards failing in one "
        "slot -> riser/slot/power check."
    ),
    no_args_is_help=True,
)

NamespaceOpt = Annotated[
    str | None,
    typer.Option("--namespace", "-n", help="Where the ledger lives (default: from settings)."),
]
NodeFilter = Annotated[str | None, typer.Option("--node", help="Only faults on this node.")]
UuidFilter = Annotated[str | None, typer.Option("--uuid", help="Only faults of this card.")]


class ExportFormat(StrEnum):
    CSV = "csv"
    JSON = "json"


EXPORT_COLUMNS = ("at", "node", "fault", "xid", "pci", "uuid", "recorder", "verdict")


@contextlib.contextmanager
def _opened(
    config: Path | None, kubeconfig: Path | None, server: str | None, namespace: str | None
) -> Iterator[ledger_store.Ledger]:
    """The ledger over a lightkube client; any API failure -> exit 1 with the error."""
    settings = guard.load_settings(config)
    try:
        with wiring.kube_client(guard.connection(kubeconfig, server, None)) as client:
            yield ledger_store.Ledger(client, namespace or settings.controller.namespace)
    except GpuguardError as e:
        output.errors.print(f"[red]error:[/red] {markup.escape(str(e))}")
        raise typer.Exit(1) from e


def _read(store: ledger_store.Ledger) -> list[faults.LedgerEntry]:
    """All entries; each malformed line is a warning on stderr naming object, key and line."""
    read = store.entries()
    for problem in read.malformed:
        output.errors.print(
            f"[yellow]warning:[/yellow] skipped malformed line: {markup.escape(problem)}"
        )
    for name in read.ignored:
        output.errors.print(
            f"[yellow]warning:[/yellow] ignored ConfigMap {markup.escape(name)}: it carries the "
            "ledger labels but not a gpuguard-ledger-<YYYY-MM>-<n> name (import it with "
            "`gpuguard ledger add`)"
        )
    return read.entries


def _utc(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    }


def ledger_list(
    node: NodeFilter = None,
    uuid: UuidFilter = None,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    namespace: NamespaceOpt = None,
    fmt: guard.FormatOpt = output.Format.TABLE,
) -> None:
    """List recorded faults, oldest first, with how many faults each card has in total.

    Examples:

      gpuguard ledger list --node gpu-node-b

      gpuguard ledger list --uuid GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d -o json
    """
    with _opened(config, kubeconfig, kube_server, namespace) as store:
        entries = _read(store)
    per_card = collections.Counter(e.uuid for e in entries if e.uuid)
    rows = [
        {**_row(e), "card_faults": per_card[e.uuid] if e.uuid else None}
        for e in entries
        if (node is None or e.node == node) and (uuid is None or e.uuid == uuid)
    ]
    if not output.emit(rows, fmt):
        columns = ("at", "node", "fault", "pci", "uuid", "recorder", "verdict", "card_faults")
        cells = [[_cell(r[c]) for c in columns] for r in rows]
        output.table(f"fault ledger: {len(rows)} of {len(entries)}", columns, cells)


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
    node: Annotated[str, typer.Option("--node", help="The node the fault happened on.")],
    xid: Annotated[int, typer.Option("--xid", min=1, max=9999, help="The Xid code, e.g. 79.")],
    pci_address: Annotated[str, typer.Option("--pci", help="PCI slot, e.g. 0000:99:00.0.")],
    uuid: Annotated[str, typer.Option("--uuid", help="Card UUID, GPU-xxxxxxxx-xxxx-...")],
    at: Annotated[
        str | None, typer.Option("--at", help="When, ISO with timezone (default: now).")
    ] = None,
    verdict: Annotated[
        decisions.Verdict | None, typer.Option("--verdict", help="The repair it needed.")
    ] = None,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    namespace: NamespaceOpt = None,
) -> None:
    """Back-fill one fault by hand (recorder ``manual``), then print the request the guard
    would draft for it now, with the card's and the slot's history.

    Example (the seed's first Xid 79 of the card in gpu-node-b's slot 0000:99:00.0):

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
    )
    try:
        line = ledger_store.format_line(entry)
    except InputError as e:
        raise typer.BadParameter(str(e), param_hint="--node") from e
    with _opened(config, kubeconfig, kube_server, namespace) as store:
        store.append(entry)
        entries = _read(store)
    sys.stdout.write(f"recorded on {node}: {line}\n{_drafted(entry, entries)}\n")


def _drafted(entry: faults.LedgerEntry, entries: list[faults.LedgerEntry]) -> str:
    history = escalation.history_for(entries, entry.uuid, entry.node, entry.pci)
    level = escalation.escalate(history)
    verdict = entry.verdict or xid_catalog.default_verdict(entry.xid or 0)
    text = escalation.request_text(entry, verdict, history, level)
    return f"escalation: {level}\nrequest: {text}"


def ledger_export(
    fmt: Annotated[
        ExportFormat, typer.Option("--format", "-f", help="csv (with a header) or json.")
    ] = ExportFormat.CSV,
    config: guard.ConfigOpt = None,
    kubeconfig: guard.KubeconfigOpt = None,
    kube_server: guard.ServerOpt = None,
    namespace: NamespaceOpt = None,
) -> None:
    """Write every recorded fault to stdout, oldest first, for spreadsheets and archives.

    Examples:

      gpuguard ledger export --format csv > ledger.csv

      gpuguard ledger export --format json | jq '.[] | select(.xid == 79)'
    """
    with _opened(config, kubeconfig, kube_server, namespace) as store:
        rows = [_row(e) for e in _read(store)]
    if fmt is ExportFormat.JSON:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    writer = csv.DictWriter(sys.stdout, fieldnames=EXPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)


app.command("list")(ledger_list)
app.command("add")(ledger_add)
app.command("export")(ledger_export)
