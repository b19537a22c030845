"""``gpuguard xid explain CODE``: what an Xid code means and what gpuguard will do about it.

A thin shell over ``gpuguard.catalog``: load the catalog with the cluster's overrides, then
print one entry (table or JSON) and gpuguard's handling of the code in plain words, so an
operator can check a class decision before it isolates anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import rich.console
import rich.table
import rich.text
import typer

from gpuguard.catalog import xid as catalog_xid
from gpuguard.cli import output
from gpuguard.model import decisions
from gpuguard.model import xid as xid_model

_VERDICT_WORDS = {
    decisions.Verdict.POWER_CYCLE: "power-cycle the node (a reboot rarely brings back a GPU "
    "that fell off the bus)",
    decisions.Verdict.GPU_RESET: "GPU reset procedure (drain the GPU, reset it, validate)",
    decisions.Verdict.RMA: "RMA: request a card replacement",
    decisions.Verdict.HUMAN_DIAGNOSIS: "human diagnosis (no automatic repair rule for this code)",
}


def explain(
    code: Annotated[
        int,
        typer.Argument(
            min=1, max=1000, metavar="CODE", help="The Xid code, e.g. 79.", show_default=False
        ),
    ],
    overrides: Annotated[
        Path | None,
        typer.Option(
            "--overrides",
            metavar="FILE",
            help="The cluster's Xid class override file (YAML, see above).",
        ),
    ] = None,
    fmt: output.FormatOpt = output.Format.TABLE,
) -> None:
    """Explain an Xid code: NVIDIA's catalog entry and what gpuguard does with it.

    Every Xid 1-172 is catalogued: NVIDIA's mnemonic, description, immediate and
    investigatory action, a cause category, and gpuguard's class:

      user           application error: never isolates, never masks a hardware Xid
      hardware       counts toward isolation; the repair verdict is shown
      informational  recorded only (also any code the catalog does not list)

    A cluster changes classes with an override file: YAML with one key, classes,
    mapping a code (1-1000) to user, hardware or informational:

      classes:
        94: hardware    # contained ECC counts as a hardware fault
        137: user       # NVLink privilege errors are the application's

    Examples:

      gpuguard xid explain 79
      gpuguard xid explain 137 --overrides /etc/gpuguard/xid-overrides.yaml
      gpuguard xid explain 48 -o json

    Exits 2 when CODE is not an integer 1-1000 or the override file is invalid.
    """
    catalog = catalog_xid.load_catalog(overrides)
    entry = catalog.entry(code)
    rules = event_rules(catalog, code)
    if not output.emit({**explanation(entry), "event_rules": rules}, fmt):
        table = _table(entry)
        if rules:
            table.add_row("per-event rules", rich.text.Text(_rules_line(rules)))
        output.console.print(table)


def event_rules(catalog: catalog_xid.XidCatalog, code: int) -> list[dict[str, str]]:
    """The per-event and promotion rules of ``code`` with the class each gives under this
    cluster's overrides (docs/xid-events.md)."""
    if catalog.rules is None:
        return []
    return [{"id": rule, "class": str(catalog.event_class(code, rule)), "action": action}
            for rule, action in catalog.rules.actions_of(code)]


def _rules_line(rules: list[dict[str, str]]) -> str:
    classes = sorted({r["class"] for r in rules})
    counts = ", ".join(f"{sum(r['class'] == c for r in rules)} {c}" for c in classes)
    return (f"{len(rules)} rule(s) judge each line of this code ({counts}); the line's rule "
            "decides, see docs/xid-events.md")


def explanation(entry: catalog_xid.XidEntry) -> dict[str, object]:
    """The entry and gpuguard's handling of it, as the JSON output shows them."""
    verdict = repair_verdict(entry)
    return {
        "code": entry.code,
        "known": entry.known,
        "mnemonic": entry.mnemonic,
        "name": entry.name,
        "dcgm_message": entry.dcgm_message,
        "immediate_action": entry.immediate_action,
        "investigatory_action": entry.investigatory_action,
        "resolution": entry.resolution or None,
        "cause": entry.cause,
        "class": entry.xid_class,
        "catalog_class": entry.catalog_class,
        "overridden": entry.overridden,
        "handling": handling(entry),
        "fast_path": is_fast_path(entry),
        "verdict": verdict,
    }


def handling(entry: catalog_xid.XidEntry) -> str:
    """What gpuguard does with this code under the current classes, in plain words."""
    unknown = "" if entry.known else "Not in gpuguard's catalog (1-172). "
    if entry.xid_class is xid_model.XidClass.USER:
        return unknown + (
            "Application error: never isolates a node, never masks a later hardware Xid."
        )
    if entry.xid_class is xid_model.XidClass.INFORMATIONAL:
        return unknown + "Recorded only: counted and shown as evidence, never isolates a node."
    fast = (
        f" Xid {entry.code} takes the fast path: with the GPU gone, isolation does not wait."
        if is_fast_path(entry)
        else ""
    )
    return unknown + (
        "Hardware fault: counts toward isolation. The node is cordoned when the GPU is also "
        "lost (capacity > allocatable) through the hold window." + fast
    )


def is_fast_path(entry: catalog_xid.XidEntry) -> bool:
    return (
        entry.xid_class is xid_model.XidClass.HARDWARE and entry.code in catalog_xid.FAST_PATH_CODES
    )


def repair_verdict(entry: catalog_xid.XidEntry) -> decisions.Verdict | None:
    """The recovery verdict, for hardware codes only (the others are never isolated)."""
    if entry.xid_class is not xid_model.XidClass.HARDWARE:
        return None
    return catalog_xid.default_verdict(entry.code)


def _table(entry: catalog_xid.XidEntry) -> rich.table.Table:
    title = rich.text.Text(f"Xid {entry.code}: {entry.name}")
    table = rich.table.Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for label, value in _rows(entry):
        table.add_row(label, rich.text.Text(value))  # Text: catalog strings are not markup
    return table


def _rows(entry: catalog_xid.XidEntry) -> list[tuple[str, str]]:
    verdict = repair_verdict(entry)
    override = f" (cluster override; catalog: {entry.catalog_class})" if entry.overridden else ""
    rows = [
        ("mnemonic", entry.mnemonic),
        ("dcgm-exporter text", entry.dcgm_message or "-"),
        ("NVIDIA immediate action", entry.immediate_action or "-"),
        ("NVIDIA investigatory action", entry.investigatory_action or "-"),
        *([("NVIDIA resolution", entry.resolution)] if entry.resolution else []),
        ("cause", entry.cause),
        ("gpuguard class", f"{entry.xid_class}{override}"),
        ("gpuguard handling", handling(entry)),
    ]
    if verdict is not None:
        rows.append(("repair verdict", f"{verdict}: {_VERDICT_WORDS[verdict]}"))
    return rows
