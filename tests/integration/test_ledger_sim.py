"""The fault ledger's ConfigMap storage against the simulator's Kubernetes API over HTTP:
concurrent writers lose and duplicate nothing, 100,000 faults stay far below the object size
limits, malformed lines are reported and skipped, API errors arrive as gpuguard's, and a
person's corrections (amend, remove) are audit lines that every reader applies."""

from __future__ import annotations

import csv
import io
import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import lightkube
import pytest
from click.testing import Result
from typer.testing import CliRunner

from gpuguard.actuators import ledger
from gpuguard.cli import ledger as ledger_cli_app
from gpuguard.errors import ConflictError, GpuguardError
from gpuguard.model import faults
from tests.conftest import SimApi

pytestmark = pytest.mark.integration
NAMESPACE = "gpuguard"
START = datetime(2026, 9, 10, 13, 3, 59, tzinfo=UTC)


def card(number: int) -> str:
    return f"GPU-{number:08x}-5e6f-7a8b-9c0d-1e2f3a4b5c6d"


def fault(number: int, *, minutes: int = 1) -> faults.LedgerEntry:
    return faults.LedgerEntry(
        at=START + timedelta(minutes=minutes * number),
        node=f"gpu-node-{number % 10_000:05d}",
        xid=79,
        pci=f"0000:{number % 256:02x}:00.0",
        uuid=card(number),
        recorder=faults.Recorder.GPUGUARD,
    )


def ledger_maps(api: SimApi) -> list[dict[str, Any]]:
    return api.store.list("ConfigMap", NAMESPACE)


def test_append_is_readable_labelled_and_idempotent(sim_api: SimApi) -> None:
    with lightkube.Client(config=sim_api.config()) as client:
        store = ledger.Ledger(client)
        store.append(fault(1))
        store.append(fault(1))  # a retried append after a lost reply
        read = store.entries()
    assert read.entries == [fault(1)]
    assert read.malformed == []
    (stored,) = ledger_maps(sim_api)
    assert stored["metadata"]["name"] == "gpuguard-ledger-2026-09-0"
    assert stored["metadata"]["labels"] == {
        "app.kubernetes.io/part-of": "gpuguard",
        "gpuguard.io/ledger": "v1",
        "gpuguard.io/ledger-month": "2026-09",
        "gpuguard.io/ledger-open": "true",
    }
    assert stored["data"] == {"gpu-node-00001": ledger.format_line(fault(1)) + "\n"}


def test_fifty_concurrent_writers_lose_nothing_and_duplicate_nothing(sim_api: SimApi) -> None:
    failures: list[BaseException] = []
    # every writer has its client before any writes: started one by one on a loaded machine,
    # each could otherwise finish before the next began, and nothing would race
    ready = threading.Barrier(50)

    def write(number: int) -> None:
        try:
            with lightkube.Client(config=sim_api.config()) as client:
                ready.wait(timeout=60)
                ledger.Ledger(client).append(fault(number))
        except BaseException as e:  # reported below, with the thread's entry
            failures.append(e)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    with lightkube.Client(config=sim_api.config()) as client:
        read = ledger.Ledger(client).entries()
    assert sorted(e.uuid or "" for e in read.entries) == sorted(card(n) for n in range(50))
    writes = [r for r in sim_api.server.requests if r.method in ("POST", "PUT")]
    assert len(writes) > 50, "the writers should have raced (else this test proves nothing)"


def test_hundred_thousand_faults_stay_within_object_size_limits(sim_api: SimApi) -> None:
    entries = [fault(n, minutes=7) for n in range(100_000)]  # ~16 months of faults
    with lightkube.Client(config=sim_api.config()) as client:
        store = ledger.Ledger(client)
        store.append_many(entries)
        read = store.entries()
    sizes = {cm["metadata"]["name"]: ledger.data_bytes(cm["data"])
             for cm in ledger_maps(sim_api)}
    assert max(sizes.values()) <= ledger.DEFAULT_SHARD_BYTES < ledger.CONFIGMAP_LIMIT_BYTES
    assert sum(sizes.values()) > 100_000 * 100  # the lines really are in there
    assert len(read.entries) == 100_000
    assert read.entries == sorted(entries, key=lambda e: (e.at, e.node))
    open_segments = [cm for cm in ledger_maps(sim_api)
                     if "gpuguard.io/ledger-open" in cm["metadata"]["labels"]]
    assert len(open_segments) == 17  # one per month: Sep 2026 .. Jan 2028


def test_full_segment_rolls_over_to_the_next(sim_api: SimApi) -> None:
    with lightkube.Client(config=sim_api.config()) as client:
        store = ledger.Ledger(client, shard_bytes=4096)
        for number in range(80):
            store.append(fault(number))
        read = store.entries()
    names = sorted(cm["metadata"]["name"] for cm in ledger_maps(sim_api))
    assert len(names) > 2
    assert all(ledger.data_bytes(cm["data"]) <= 4096 for cm in ledger_maps(sim_api))
    assert len(read.entries) == 80
    labelled_open = [cm["metadata"]["name"] for cm in ledger_maps(sim_api)
                     if "gpuguard.io/ledger-open" in cm["metadata"]["labels"]]
    assert labelled_open == [max(names, key=lambda n: int(n.rsplit("-", 1)[1]))]


def test_malformed_lines_in_the_stored_ledger_are_reported_not_fatal(sim_api: SimApi) -> None:
    good = ledger.format_line(fault(1))
    sim_api.store.create("ConfigMap", NAMESPACE, {
        "metadata": {"name": "gpuguard-ledger-2026-09-0", "labels": dict(ledger.LEDGER_LABELS)},
        "data": {"gpu-node-00001": f"{good}\n2026-09-21T05:52:44Z xid-79 oops\n"},
    })
    with lightkube.Client(config=sim_api.config()) as client:
        read = ledger.Ledger(client).entries()
    assert read.entries == [fault(1)]
    (problem,) = read.malformed
    assert problem.startswith("ConfigMap gpuguard-ledger-2026-09-0 key gpu-node-00001 line 2:")


def test_only_configmaps_with_gpuguards_names_are_the_ledger(sim_api: SimApi) -> None:
    """Anyone who can create ConfigMaps could add the two labels: such a ConfigMap is
    reported and ignored, never merged into a card's history."""
    injected = f"2026-09-21T05:52:44Z xid-79 0000:99:00.0 {SEED_CARD} manual\n"
    sim_api.store.create("ConfigMap", NAMESPACE, {
        "metadata": {"name": "gpu-fault-ledger", "labels": dict(ledger.LEDGER_LABELS)},
        "data": {"gpu-node-b": injected * 3},
    })
    with lightkube.Client(config=sim_api.config()) as client:
        store = ledger.Ledger(client)
        store.append(fault(1))
        read = store.entries()
    assert read.entries == [fault(1)]
    assert read.ignored == ["gpu-fault-ledger"]


def test_the_controllers_ledger_quarantines_a_malformed_line_once(sim_api: SimApi) -> None:
    """One bad line naming a card used to make its history unknown for good (the node waited
    forever); it is moved aside, reported, and the card's readable history counts again."""
    good = ledger.format_line(fault(1))
    bad = f"2026-09-21T05:52:44Z xid-79 0000:99:00.0 {SEED_CARD} manual not-a-verdict"
    name = "gpuguard-ledger-2026-09-0"
    sim_api.store.create("ConfigMap", NAMESPACE, {
        "metadata": {"name": name, "labels": dict(ledger.LEDGER_LABELS)},
        "data": {"gpu-node-00001": f"{good}\n{bad}\n"},
    })
    with lightkube.Client(config=sim_api.config()) as client:
        first = ledger.Ledger(client, quarantine=True).entries()
        again = ledger.Ledger(client, quarantine=True).entries()
    assert first.entries == again.entries == [fault(1)]
    assert first.malformed == []
    assert again.malformed == []
    assert again.quarantined == [f"ConfigMap {name}: gpu-node-00001: {bad}"]
    stored = sim_api.store.get("ConfigMap", NAMESPACE, name)["data"]
    assert stored == {"gpu-node-00001": f"{good}\n",
                      ledger.QUARANTINE_KEY: f"gpu-node-00001: {bad}\n"}


def test_a_writer_that_keeps_losing_gives_up_with_a_conflict(sim_api: SimApi) -> None:
    with lightkube.Client(config=sim_api.config()) as client:
        store = ledger.Ledger(client, retry=ledger.RetryPolicy(attempts=3), sleep=lambda _: None)
        store.append(fault(1))
        path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/gpuguard-ledger-2026-09-0"
        sim_api.server.fail_next("PUT", path, 409, "Conflict", times=3)
        with pytest.raises(ConflictError, match="still conflicting after 3 tries"):
            store.append(fault(2))
        sim_api.server.fail_next("PUT", path, 409, "Conflict", times=2)
        store.append(fault(2))
        assert [e.uuid for e in store.entries().entries] == [card(1), card(2)]


def test_losing_the_race_to_create_a_segment_rereads_and_appends(sim_api: SimApi) -> None:
    collection = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    sim_api.server.fail_next("POST", collection, 409, "AlreadyExists")
    with lightkube.Client(config=sim_api.config()) as client:
        store = ledger.Ledger(client, sleep=lambda _: None)
        store.append(fault(1))
        assert store.entries().entries == [fault(1)]
    posts = [r.method for r in sim_api.server.requests if r.method == "POST"]
    assert posts == ["POST", "POST"]


def test_api_errors_become_gpuguard_errors_naming_the_object(sim_api: SimApi) -> None:
    sim_api.server.fail_next("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps", 403,
                             "Forbidden")
    with (
        lightkube.Client(config=sim_api.config()) as client,
        pytest.raises(GpuguardError, match="listing ledger ConfigMaps in gpuguard"),
    ):
        ledger.Ledger(client).entries()


# --- gpuguard ledger list / add / export against the simulator's API -------------------------

SEED_CARD = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
cli = CliRunner(env={"COLUMNS": "200"})


def ledger_cli(api: SimApi, *args: str) -> Result:
    return cli.invoke(ledger_cli_app.app, [*args, "--kube-server", api.url])


@pytest.fixture
def cluster(sim_api: SimApi) -> SimApi:
    """The simulator's API with the seed's GPU nodes registered."""
    for name in ("gpu-node-a", "gpu-node-b"):
        sim_api.store.create("Node", "", {"metadata": {"name": name}, "spec": {}, "status": {}})
    return sim_api


def add_seed_fault(api: SimApi, at: str, uuid: str = SEED_CARD) -> Result:
    result = ledger_cli(api, "add", "--node", "gpu-node-b", "--xid", "79", "--pci", "99:00",
                        "--uuid", uuid, "--at", at, "--verdict", "power-cycle")
    assert result.exit_code == 0, result.output
    return result


def test_cli_seed_backfill_then_third_fault_drafts_a_replacement(cluster: SimApi) -> None:
    first = add_seed_fault(cluster, "2026-09-10T13:03:59Z")
    assert "escalation: none" in first.stdout
    second = add_seed_fault(cluster, "2026-09-21T14:52:44+09:00")  # KST, stored in UTC
    assert "escalation: inspection" in second.stdout
    third = add_seed_fault(cluster, "2026-10-02T08:00:00Z")
    assert f"recorded on gpu-node-b: 2026-10-02T08:00:00Z xid-79 0000:99:00.0 {SEED_CARD}" \
        in third.stdout
    assert "escalation: replacement" in third.stdout
    assert ("failed 3 times (2026-09-10 on gpu-node-b slot 0000:99:00.0, 2026-09-21 on "
            "gpu-node-b slot 0000:99:00.0, 2026-10-02 on gpu-node-b slot 0000:99:00.0)"
            in third.stdout)
    stored = cluster.store.get("ConfigMap", NAMESPACE, "gpuguard-ledger-2026-09-0")
    assert stored["data"]["gpu-node-b"].splitlines() == [
        f"2026-09-10T13:03:59Z xid-79 0000:99:00.0 {SEED_CARD} manual power-cycle "
        "confirmed-by-person",
        f"2026-09-21T05:52:44Z xid-79 0000:99:00.0 {SEED_CARD} manual power-cycle "
        "confirmed-by-person",
    ]


def test_cli_add_refuses_a_node_the_cluster_does_not_have_unless_forced(cluster: SimApi) -> None:
    args = ("add", "--node", "gpu-node-z", "--xid", "79", "--pci", "99:00", "--uuid", SEED_CARD,
            "--at", "2026-09-10T13:03:59Z")
    refused = ledger_cli(cluster, *args)
    assert refused.exit_code == 2
    assert refused.stderr.strip() == (
        "error: node gpu-node-z is not in the cluster: check the name (kubectl get nodes), "
        "or --force for a node that has left it"
    )
    assert cluster.store.list("ConfigMap", NAMESPACE) == []  # nothing written
    forced = ledger_cli(cluster, *args, "--force")
    assert forced.exit_code == 0, forced.output
    assert "recorded on gpu-node-z" in forced.stdout


def test_cli_new_card_in_the_same_slot_asks_for_a_slot_check(cluster: SimApi) -> None:
    add_seed_fault(cluster, "2026-09-10T13:03:59Z")
    result = add_seed_fault(cluster, "2026-10-02T08:00:00Z", uuid=card(7))
    assert "escalation: slot-check" in result.stdout
    assert "check the riser, the slot and its power" in result.stdout


def test_cli_list_filters_and_counts_card_faults(sim_api: SimApi) -> None:
    with lightkube.Client(config=sim_api.config()) as client:
        ledger.Ledger(client).append_many([fault(1), fault(2), fault(10_001)])  # card 1 twice
    same_card = fault(10_001)
    with lightkube.Client(config=sim_api.config()) as client:
        ledger.Ledger(client).append(
            faults.LedgerEntry(at=same_card.at + timedelta(days=3), node="gpu-node-00002",
                               xid=48, pci=same_card.pci, uuid=card(1),
                               recorder=faults.Recorder.MANUAL)
        )
    by_card = ledger_cli(sim_api, "list", "--uuid", card(1), "-o", "json")
    assert by_card.exit_code == 0, by_card.output
    rows = json.loads(by_card.stdout)
    assert [(r["node"], r["fault"], r["card_faults"]) for r in rows] == [
        ("gpu-node-00001", "xid-79", 2), ("gpu-node-00002", "xid-48", 2),
    ]
    by_node = json.loads(ledger_cli(sim_api, "list", "--node", "gpu-node-00001", "-o",
                                    "json").stdout)
    assert [r["uuid"] for r in by_node] == [card(1), card(10_001)]
    table = ledger_cli(sim_api, "list")
    assert table.exit_code == 0
    assert "fault ledger: 4 of 4" in table.stdout


def test_cli_export_csv_and_json(cluster: SimApi) -> None:
    add_seed_fault(cluster, "2026-09-10T13:03:59Z")
    csv_out = ledger_cli(cluster, "export", "--format", "csv")
    assert csv_out.exit_code == 0, csv_out.output
    (row,) = list(csv.DictReader(io.StringIO(csv_out.stdout)))
    assert row == {
        "at": "2026-09-10T13:03:59Z", "node": "gpu-node-b", "fault": "xid-79", "xid": "79",
        "pci": "0000:99:00.0", "uuid": SEED_CARD, "recorder": "manual", "verdict": "power-cycle",
        "confirmation": "confirmed-by-person", "id": row["id"], "record": "fault", "op": "",
        "by": "", "why": "", "target": "", "new": "",
    }
    json_out = json.loads(ledger_cli(cluster, "export", "--format", "json").stdout)
    assert json_out[0]["xid"] == 79
    assert json_out[0]["uuid"] == SEED_CARD


def test_cli_warns_about_malformed_lines_and_shows_the_rest(sim_api: SimApi) -> None:
    sim_api.store.create("ConfigMap", NAMESPACE, {
        "metadata": {"name": "gpuguard-ledger-2026-09-0", "labels": dict(ledger.LEDGER_LABELS)},
        "data": {"gpu-node-b": (f"2026-09-10T13:03:59Z xid-79 0000:99:00.0 {SEED_CARD} manual\n"
                                "2026-09-21 xid-79 by hand\n")},
    })
    result = ledger_cli(sim_api, "export", "--format", "json")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 1
    assert ("warning: skipped malformed line: ConfigMap gpuguard-ledger-2026-09-0 key gpu-node-b "
            "line 2") in result.stderr


# --- corrections: amend and remove write audit lines, never delete ---------------------------


def rows(api: SimApi, *args: str) -> list[dict[str, Any]]:
    result = ledger_cli(api, "list", *args, "-o", "json")
    assert result.exit_code == 0, result.output
    listed: list[dict[str, Any]] = json.loads(result.stdout)
    return listed


def test_cli_remove_takes_a_wrong_line_out_of_every_count_and_keeps_who_and_why(
    cluster: SimApi,
) -> None:
    add_seed_fault(cluster, "2026-09-10T13:03:59Z")
    add_seed_fault(cluster, "2026-09-21T05:52:44Z")
    wrong = ledger_cli(cluster, "add", "--node", "gpu-node-b", "--xid", "13", "--pci", "99:00",
                       "--uuid", SEED_CARD, "--at", "2026-09-25T10:00:00Z", "--force")
    assert "escalation: replacement" in wrong.stdout  # the user Xid pushed a healthy card over
    (listed,) = [r for r in rows(cluster, "--uuid", SEED_CARD) if r["fault"] == "xid-13"]
    assert listed["card_faults"] == 3
    wrong_line = (f"2026-09-25T10:00:00Z xid-13 0000:99:00.0 {SEED_CARD} manual "
                  "confirmed-by-person")

    removed = ledger_cli(cluster, "remove", "--id", listed["id"], "--by", "kim",
                         "--why", "Xid 13 came from a user's kernel")
    assert removed.exit_code == 0, removed.output
    assert removed.stdout == (f"removed from gpu-node-b by kim: {wrong_line}\n"
                              f"card {SEED_CARD}: 2 confirmed fault(s) now counted\n")
    assert [(r["fault"], r["card_faults"]) for r in rows(cluster)] == [("xid-79", 2)] * 2

    stored = cluster.store.get("ConfigMap", NAMESPACE, "gpuguard-ledger-2026-09-0")
    *faults_kept, audit_line = stored["data"]["gpu-node-b"].splitlines()
    assert wrong_line in faults_kept  # never deleted
    at, word, record = audit_line.split(" ", 2)
    assert word == "audit"
    assert json.loads(record) == {"op": "remove", "target": wrong_line, "by": "kim",
                                  "why": "Xid 13 came from a user's kernel"}
    (trail,) = rows(cluster, "--audit")
    assert (trail["at"], trail["op"], trail["by"], trail["target"]) == (
        at, "remove", "kim", wrong_line)

    again = ledger_cli(cluster, "remove", "--id", listed["id"], "--why", "twice", "--by", "kim")
    assert again.exit_code == 2
    assert "already removed or amended" in again.stderr
    exported = json.loads(ledger_cli(cluster, "export", "--format", "json").stdout)
    assert [(r["record"], r["fault"], r["op"]) for r in exported] == [
        ("fault", "xid-79", None), ("fault", "xid-79", None), ("audit", None, "remove")]


def test_cli_amend_by_place_replaces_the_line_and_keeps_the_old_one(cluster: SimApi) -> None:
    add_seed_fault(cluster, "2026-09-10T13:03:59Z")
    old = f"2026-09-10T13:03:59Z xid-79 0000:99:00.0 {SEED_CARD} manual power-cycle " \
          "confirmed-by-person"
    new = old.replace("power-cycle", "rma")
    where = ("--node", "gpu-node-b", "--at", "2026-09-10T22:03:59+09:00", "--fault", "xid-79")
    amended = cli.invoke(ledger_cli_app.app, [
        "amend", *where, "--set-verdict", "rma", "--why", "the vendor confirmed an RMA",
        "--kube-server", cluster.url], env={"USER": "lee"})
    assert amended.exit_code == 0, amended.output
    assert amended.stdout.startswith(f"amended on gpu-node-b by lee:\n  was: {old}\n  now: {new}\n")
    assert [(r["verdict"], r["recorder"]) for r in rows(cluster)] == [("rma", "manual")]
    (trail,) = rows(cluster, "--audit")
    assert (trail["op"], trail["by"], trail["target"], trail["new"]) == ("amend", "lee", old, new)

    same = ledger_cli(cluster, "amend", *where, "--set-verdict", "rma", "--why", "again",
                      "--by", "lee")  # the place now names the amended line
    assert same.exit_code == 2
    assert f"nothing to change: the line already reads {new}" in same.stderr


def test_cli_amend_checks_the_new_line_as_add_does(cluster: SimApi) -> None:
    add_seed_fault(cluster, "2026-09-10T13:03:59Z")
    (row,) = rows(cluster)
    for change, says in ((("--set-fault", "xid-13"), "user-class Xid"),
                         (("--set-at", "2999-01-01T00:00:00Z"), "in the future")):
        result = ledger_cli(cluster, "amend", "--id", row["id"], *change, "--why", "x",
                            "--by", "kim")
        assert result.exit_code == 2
        assert says in result.stderr
    assert rows(cluster, "--audit") == []


def test_cli_two_lines_at_one_instant_ask_for_an_id(cluster: SimApi) -> None:
    add_seed_fault(cluster, "2026-09-10T13:03:59Z")
    add_seed_fault(cluster, "2026-09-10T13:03:59Z", uuid=card(7))
    result = ledger_cli(cluster, "remove", "--node", "gpu-node-b", "--at",
                        "2026-09-10T13:03:59Z", "--fault", "xid-79", "--why", "x", "--by", "kim")
    assert result.exit_code == 2
    assert "2 lines match gpu-node-b 2026-09-10T13:03:59Z xid-79: choose one with --id:" \
        in result.stderr
    assert all(r["id"] in result.stderr for r in rows(cluster))
    missing = ledger_cli(cluster, "remove", "--id", "000000000000", "--why", "x", "--by", "kim")
    assert missing.exit_code == 2
    assert "no fault line matches id 000000000000" in missing.stderr


def test_cli_who_defaults_to_the_kubeconfig_user(cluster: SimApi, tmp_path: Path) -> None:
    add_seed_fault(cluster, "2026-09-10T13:03:59Z")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: sim\n"
        f"clusters: [{{name: sim, cluster: {{server: '{cluster.url}'}}}}]\n"
        "users: [{name: alice@ops, user: {}}]\n"
        "contexts: [{name: sim, context: {cluster: sim, user: alice@ops}}]\n"
    )
    result = cli.invoke(ledger_cli_app.app, [
        "remove", "--id", rows(cluster)[0]["id"], "--why", "duplicate of the vendor's ticket",
        "--kubeconfig", str(kubeconfig)], env={"USER": "root"})
    assert result.exit_code == 0, result.output
    assert [r["by"] for r in rows(cluster, "--audit")] == ["alice@ops"]


def test_an_audit_write_that_loses_a_race_rereads_and_retries(sim_api: SimApi) -> None:
    with lightkube.Client(config=sim_api.config()) as client:
        store = ledger.Ledger(client, sleep=lambda _: None)
        store.append(fault(1))
        removal = ledger.AuditRecord(
            at=START + timedelta(days=1), node=fault(1).node, op=ledger.AuditOp.REMOVE,
            target=ledger.format_line(fault(1)), by="kim", why="a test card",
        )
        path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/gpuguard-ledger-2026-09-0"
        sim_api.server.fail_next("PUT", path, 409, "Conflict", times=2)
        store.record_audit(removal)
        store.record_audit(removal)  # a retried correction is stored once
        read = store.entries()
    assert (read.entries, read.removed, read.audits) == ([], [fault(1)], [removal])
