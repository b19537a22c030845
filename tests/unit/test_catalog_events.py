"""Per-event Xid rules: NVIDIA's NVLink5 decode, Xid 74 register bits, Xid 94/95 reset flags,
Xid 154's recovery action, the promotion rules, and a cluster's override of one rule."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpuguard.catalog import events
from gpuguard.catalog import xid as catalog_xid
from gpuguard.errors import CatalogError
from gpuguard.kernlog import parse
from gpuguard.model import xid as xid_model

REPO = Path(__file__).resolve().parents[2]
DECODE = REPO / "src/gpuguard/catalog/reference/nvlink5_decode.tsv"
Cls = xid_model.XidClass
RULES = events.packaged_rules()


def one_event(line: str) -> xid_model.KernelEvent:
    found = list(parse.parse_lines([line]))
    assert len(found) == 1, line
    return found[0]


def judged(line: str) -> events.Judgement | None:
    return RULES.judge(one_event(line))


def decode_rows() -> list[dict[str, str]]:
    lines = [x for x in DECODE.read_text(encoding="utf-8").splitlines() if not x.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


@pytest.mark.parametrize(
    ("line", "rule", "xid_class"),
    [
        pytest.param(
            "NVRM: Xid (PCI:0018:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 "
            "(0x00086226 0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)",
            "xid149:NETIR_BER_EVENT:0:0x00000001", Cls.INFORMATIONAL,
            id="gb200-ber-event-is-ignore",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE "
            "Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 "
            "0x00000004)",
            "xid145:RLW_RXPIPE:0:0x00000008", Cls.INFORMATIONAL,
            id="gb200-rxpipe-is-ignore",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0019:01:00): 145, RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 "
            "(0x040988e2 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)",
            "xid145:RLW_SRC_TRACK:0:0x00000008", Cls.INFORMATIONAL,
            id="gb200-src-track-waits-for-xid-154",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 "
            "(0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
            "xid149:NETIR_LINK_EVT/NETIR_LINK_DOWN:33:any", Cls.HARDWARE,
            id="gb200-link-down-peer-is-reset",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 "
            "(0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
            "xid149:NETIR/NETIR_INT:0:any", Cls.HARDWARE,
            id="gb200-netir-int-is-reset-not-rxpipe",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:D8:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal "
            "error detected on link 14(0x100000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
            "xid74:reg0:sympathetic", Cls.INFORMATIONAL,
            id="xid74-bit20-is-sympathetic",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:D8:00): 74, NVLink: fatal error detected on link 3"
            "(0x10001, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
            "xid74:reg0:possible-hw", Cls.HARDWARE,
            id="xid74-bit16-with-bit0-is-hardware",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9). "
            "RST: No, D-RST: No",
            "xid94:no-reset", Cls.INFORMATIONAL,
            id="xid94-no-reset-restarts-the-app-only",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). "
            "RST: Yes, D-RST: No",
            "xid95:reset", Cls.HARDWARE,
            id="xid95-rst-yes-is-reset",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x4 (Drain and "
            "Reset) to 0x0 (None)",
            "xid154:none", Cls.INFORMATIONAL,
            id="xid154-back-to-none-is-news",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed from 0x4 (Drain and "
            "Reset) to 0x1 (GPU Reset Required)",
            "xid154:reset", Cls.HARDWARE,
            id="xid154-reset-required",
        ),
    ],
)
def test_each_line_is_judged_by_its_own_rule(line: str, rule: str, xid_class: Cls) -> None:
    found = judged(line)
    assert found is not None
    assert (found.rule, found.xid_class) == (rule, xid_class)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.", id="xid79"),
        pytest.param(
            "NVRM: Xid (PCI:0018:01:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 13 (0x0409a0c2",
            id="nvlink5-block-cut-short",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0018:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 "
            "(0x00086226 0x00000040 0x00000000 0x00000000)",
            id="nvlink5-status-the-sheet-does-not-list",
        ),
    ],
)
def test_a_line_no_rule_matches_keeps_its_codes_class(line: str) -> None:
    assert judged(line) is None
    assert catalog_xid.packaged_catalog().event_class(one_event(line).xid or 0, "") is (
        catalog_xid.packaged_catalog().xid_class(one_event(line).xid or 0)
    )


def test_every_row_of_nvidias_decode_sheet_is_a_rule_with_its_class() -> None:
    rows = decode_rows()
    nvlink5 = [r for code in range(144, 151) for r in RULES.events.get(code, ())]
    assert len(nvlink5) == len(rows) == 98  # gpud's 94, 3 second actions, MSE Degraded
    not_reset = [r for r in rows if r["immediate"] != "RESET_GPU"]
    assert len(not_reset) == 53  # 45 IGNORE + 8 XID_154_EVAL: no GPU reset
    assert sum(r.xid_class is Cls.HARDWARE for r in nvlink5) == 45


def test_each_sheet_row_matches_a_line_built_from_it_and_gets_its_action() -> None:
    for row in decode_rows():
        pattern = row["intrinfo_v1"].replace("-", "0")
        status = "0x00000010" if row["error_status"] == "any" else row["error_status"]
        line = (
            f"NVRM: Xid (PCI:0000:04:00): {row['xid']}, {row['unit'].replace(' ', '_')} "
            "Nonfatal XC0 i0 Link 00 "
            f"({int(pattern, 2):#010x} {status} 0x00000000 0x00000000)"
        )
        found = judged(line)
        assert found is not None, line
        assert found.action == row["immediate"], line


def occurrences(*items: tuple[float, int, str]) -> list[events.Occurrence]:
    return [events.Occurrence(at=at, card="GPU-a", code=code, location=where)
            for at, code, where in items]


SM = "(GPC 7, TPC 0, SM 1)"


@pytest.mark.parametrize(
    ("history", "promoted"),
    [
        pytest.param(occurrences((0, 13, SM), (60, 13, SM), (120, 13, SM)), "xid13-repeat-sm",
                     id="xid13-three-times-same-sm-is-hardware"),
        pytest.param(occurrences((0, 13, SM), (60, 13, "(GPC 1, TPC 0, SM 0)"), (120, 13, SM)),
                     None, id="xid13-different-sms-stay-the-users"),
        pytest.param(occurrences((0, 13, SM), (60, 13, SM), (90_000, 13, SM)), None,
                     id="xid13-outside-the-window-stays-the-users"),
        pytest.param(occurrences((100, 45, "")), "xid45-alone",
                     id="xid45-alone-restarts-fabric-manager"),
        pytest.param(occurrences((0, 145, ""), (100, 45, "")), None,
                     id="xid45-after-another-xid-follows-that-xid"),
    ],
)
def test_promotions(history: list[events.Occurrence], promoted: str | None) -> None:
    found = RULES.promotion(history, history[-1])
    assert (found.rule if found else None) == promoted


def test_the_agents_occurrence_reads_the_sm_and_link() -> None:
    event = one_event("NVRM: Xid (PCI:0000:cb:00): 13, Graphics SM Warp Exception on "
                      "(GPC 7, TPC 0, SM 1): Out Of Range Address")
    assert events.occurrence(event, "GPU-a", 5.0).location == SM


def test_a_cluster_can_change_one_rules_class(tmp_path: Path) -> None:
    path = tmp_path / "overrides.yaml"
    path.write_text('events:\n  "xid149:NETIR_BER_EVENT:0:0x00000001": hardware\n')
    catalog = catalog_xid.load_catalog(path)
    assert catalog.is_hardware_event(149, "xid149:NETIR_BER_EVENT:0:0x00000001")
    assert not catalog.is_hardware_event(149, "xid149:NETIR_BER_EVENT:0:0x00000000")
    assert catalog.is_hardware_event(149, "")  # no rule: the code's class


def test_an_override_of_an_unknown_rule_names_it(tmp_path: Path) -> None:
    path = tmp_path / "overrides.yaml"
    path.write_text('events:\n  "xid149:no-such-rule": hardware\n')
    with pytest.raises(CatalogError, match="xid149:no-such-rule"):
        catalog_xid.load_catalog(path)


def test_a_broken_rules_file_is_a_catalog_error_naming_it() -> None:
    with pytest.raises(CatalogError, match=r"rules\.json: events"):
        events.parse_rules_json('{"about": "", "events": [{"id": ""}], "promotions": []}',
                                source="rules.json")


def test_the_reference_transcription_of_the_sheet_agrees_row_by_row() -> None:
    """xid_catalog.md's copy of the sheet (91 rows, from gpud) against nvlink5_decode.tsv: the
    three RLW_RXPIPE rows with a second action ("Non-fatal*") are missing there, and the rows
    corrected against NVIDIA's page (no error status: "any"; the second actions; MSE Degraded)
    are not gpud's."""
    reference = (REPO / "src/gpuguard/catalog/reference/xid_catalog.md").read_text("utf-8")
    start = reference.index("## NVLink5 (Xid 144-150) decode table")
    lines = reference[start : reference.index("\n## ", start + 1)].splitlines()
    md = {tuple(c.strip() for c in line.strip("|").split("|")[:6])
          for line in lines if line.startswith("| 14") or line.startswith("| 150")}
    gpuds = [r for r in decode_rows() if not r["variant"] and r["unit"] != "MSE Degraded"]
    tsv = {(r["xid"], r["unit"], r["intrinfo_v1"], r["intrinfo_v2"],
            r["error_status"].replace("any", "0x00000000"), r["immediate"]) for r in gpuds}
    assert md <= tsv
    assert (len(md), len(tsv - md)) == (91, 3)
    assert {row[1] for row in tsv - md} == {"RLW_RXPIPE"}


@pytest.mark.parametrize(
    ("words", "driver", "rule"),
    [
        pytest.param("0x00000004 0x00000001", 580, "xid145:RLW_REMAP:0:0x00000001",
                     id="v2-layout-from-r575"),
        pytest.param("0x00000004 0x00000001", 570, "xid145:RLW_REMAP:0:0x00000001",
                     id="no-v1-rule-matches-so-v2-is-tried"),
        pytest.param("0x00000082 0x00000001", 570, "xid145:RLW_REMAP:0:0x00000001",
                     id="v1-layout-before-r575"),
        pytest.param("0x00000082 0x00000001", None, "xid145:RLW_REMAP:0:0x00000001",
                     id="unknown-driver-either-layout"),
    ],
)
def test_the_driver_branch_picks_the_layout_first(
    words: str, driver: int | None, rule: str | None
) -> None:
    event = one_event(f"NVRM: Xid (PCI:0000:04:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 00 "
                      f"({words})")
    found = RULES.judge(event, driver)
    assert (found.rule if found else None) == rule


@pytest.mark.parametrize(
    ("line", "rule", "xid_class"),
    [
        pytest.param("149, NETIR_LINK_EVT Fatal XC0 i0 Link 01 (0x021425c6 0x00000010)",
                     "xid149:NETIR_LINK_EVT/NETIR_LINK_DOWN:33:any", Cls.HARDWARE,
                     id="link-down-with-any-status"),
        pytest.param("149, NETIR_LINK_EVT Fatal XC0 i0 Link 01 (0x026801c6 0x00000002)",
                     "xid149:NETIR_LINK_EVT/NETIR_LINK_DOWN:38:any", Cls.INFORMATIONAL,
                     id="link-down-subcode-38-is-ignore"),
        pytest.param("145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x040984c2 0x00000001)",
                     "xid145:RLW_RXPIPE:0:0x00000001:action2", Cls.HARDWARE,
                     id="rxpipe-second-action-is-reset"),
        pytest.param("145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x040980c2 0x00000001)",
                     "xid145:RLW_RXPIPE:0:0x00000001", Cls.INFORMATIONAL,
                     id="rxpipe-first-action-is-ignore"),
        pytest.param("150, MSE_WATCHDOG Fatal XC0 i0 Link -1 (0x00000000 0xffffffff)",
                     "xid150:MSE Degraded:0:0xffffffff", Cls.HARDWARE, id="mse-degraded"),
    ],
)
def test_rows_corrected_against_nvidias_page(line: str, rule: str, xid_class: Cls) -> None:
    found = judged(f"NVRM: Xid (PCI:0000:04:00): {line}")
    assert found is not None
    assert (found.rule, found.xid_class) == (rule, xid_class)


def test_a_kernel_event_is_judged_hardware_by_its_rule() -> None:
    catalog = catalog_xid.packaged_catalog()
    benign = one_event("NVRM: Xid (PCI:0018:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link "
                       "03 (0x00086226 0x00000001 0x00000000 0x00000000)")
    reset = one_event("NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 "
                      "(0x000fe406 0x00000000 0x00000000 0x00000000)")
    fell = one_event("NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.")
    assert [catalog.judges_hardware(e) for e in (benign, reset, fell)] == [False, True, True]
    assert catalog.has_event_rules(149)
    assert not catalog.has_event_rules(79)


def test_a_promotion_counts_only_the_event_rules_it_names() -> None:
    def xid74(at: float, rule: str) -> events.Occurrence:
        return events.Occurrence(at=at, card="GPU-a", code=74, link=3, rule=rule)

    ecc = [xid74(t, "xid74:reg0:ecc-parity") for t in (0, 60, 120)]
    found = RULES.promotion(ecc, ecc[-1])
    assert found is not None
    assert found.rule == "xid74-ecc-parity-repeat"
    ignorable = [xid74(t, "xid74:reg0:ignorable") for t in (0, 60, 120)]
    assert RULES.promotion(ignorable, ignorable[-1]) is None


def test_a_promotion_never_lowers_the_lines_own_class() -> None:
    hardware = events.Judgement("xid94:reset", Cls.HARDWARE, "RESET_GPU", "")
    user = events.Judgement("p", Cls.USER, "RESTART_FM", "")
    assert events.worse(user, hardware) is hardware
    assert events.worse(hardware, None) is hardware


@pytest.mark.parametrize(
    ("registers", "rule", "xid_class"),
    [
        pytest.param("0x0, 0x0, 0x41, 0x0, 0x0", "xid74:reg2:ecc-parity", Cls.INFORMATIONAL,
                     id="third-register-ecc-parity"),
        pytest.param("0x0, 0x0, 0x0, 0x0, 0x800000", "xid74:reg4:ecc-threshold",
                     Cls.INFORMATIONAL, id="fifth-register-threshold-continue"),
        pytest.param("0x0, 0x0, 0x0, 0x40000, 0x0", "xid74:reg3:sympathetic", Cls.INFORMATIONAL,
                     id="fourth-register-sympathetic"),
        pytest.param("0x200000, 0x0, 0x1, 0x0, 0x0", "xid74:reg0:marginal-si", Cls.HARDWARE,
                     id="the-worst-register-wins"),
    ],
)
def test_xid74_registers_beyond_the_first(registers: str, rule: str, xid_class: Cls) -> None:
    found = judged(f"NVRM: Xid (PCI:0000:D8:00): 74, NVLink: fatal error detected on link 2"
                   f"({registers}, 0x0, 0x0)")
    assert found is not None
    assert (found.rule, found.xid_class) == (rule, xid_class)


def test_an_xid74_bit_nvidia_does_not_name_keeps_the_codes_class() -> None:
    assert judged("NVRM: Xid (PCI:0000:D8:00): 74, NVLink: fatal error detected on link 2"
                  "(0x4, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)") is None

