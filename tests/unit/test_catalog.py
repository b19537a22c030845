"""The Xid catalog: every code 1-172 as NVIDIA's reference lists it, gpuguard's default
classes, the repair verdict per code, and the cluster override file (good and bad)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuguard.catalog import overrides
from gpuguard.catalog import xid as catalog_xid
from gpuguard.errors import CatalogError
from gpuguard.model import decisions
from gpuguard.model import xid as xid_model

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src/gpuguard/catalog"
REFERENCE = PACKAGE / "reference/xid_catalog.md"
FIXTURES = REPO / "tests/data/catalog"
Cls = xid_model.XidClass
Cause = xid_model.CauseCategory
Action = catalog_xid.ImmediateAction
Verdict = decisions.Verdict


def reference_rows() -> dict[int, list[str]]:
    """The reference's full table, read independently of the generator: code -> cells."""
    lines = REFERENCE.read_text(encoding="utf-8").splitlines()
    table = lines[lines.index("## Full catalog, Xid 1-172") :]
    rows = [line.strip("|").split("|") for line in table if line.startswith("| ")]
    return {
        int(cells[0]): [c.strip() for c in cells] for cells in rows if cells[0].strip().isdigit()
    }


@pytest.fixture(scope="module")
def catalog() -> catalog_xid.XidCatalog:
    return catalog_xid.load_catalog()


def test_every_code_from_1_to_172_has_a_complete_entry(catalog: catalog_xid.XidCatalog) -> None:
    assert set(catalog.entries) == set(range(1, 173))
    for code in range(1, 173):
        entry = catalog.entry(code)
        assert (entry.code, entry.known) == (code, True)
        assert entry.name.strip()
        assert entry.mnemonic.strip()


def test_packaged_json_uses_only_the_models_enum_values() -> None:
    raw = json.loads((PACKAGE / "data/xid_catalog.json").read_text(encoding="utf-8"))
    causes = {c.value for c in Cause}
    classes = {c.value for c in Cls}
    actions = {a.value for a in Action} | {None}
    for item in raw["entries"]:
        assert item["cause"] in causes, item
        assert item["class"] in classes, item
        assert item["immediate_action"] in actions, item


def test_mnemonics_and_nvidia_actions_are_the_reference_tables(
    catalog: catalog_xid.XidCatalog,
) -> None:
    for code, cells in reference_rows().items():
        entry = catalog.entry(code)
        assert entry.mnemonic == cells[1], code
        assert (entry.immediate_action or "") == cells[4], code
        assert (entry.investigatory_action or "") == cells[5], code
        assert entry.name == ("Unused/reserved" if cells[2] == "Unused" else cells[2]), code


def test_nvidias_resolution_prose_is_carried_for_163_and_168_only(
    catalog: catalog_xid.XidCatalog,
) -> None:
    """NVIDIA's catalog gives these two a resolution in prose, no bucket (the reference's
    resolution section); 163 stays informational (no reset needed), 168 is a repair."""
    with_prose = {code for code, entry in catalog.entries.items() if entry.resolution}
    assert with_prose == {163, 168}
    assert (catalog.entry(163).xid_class, catalog.entry(168).xid_class) == (
        Cls.INFORMATIONAL, Cls.HARDWARE)
    assert "ECC" in catalog.entry(168).resolution
    text = REFERENCE.read_text(encoding="utf-8")
    assert all(f"| {code} | {catalog.entry(code).resolution} |" in text for code in with_prose)


def test_packaged_json_is_what_the_generator_makes_from_the_reference() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts/build-xid-catalog"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_default_user_codes_are_the_device_plugins_application_errors(
    catalog: catalog_xid.XidCatalog,
) -> None:
    assert catalog.user_codes() == catalog_xid.DEFAULT_USER_CODES == {13, 31, 43, 45, 68, 109}


@pytest.mark.parametrize(
    ("code", "immediate", "cause", "xid_class"),
    [
        pytest.param(79, Action.RESTART_BM, Cause.BUS, Cls.HARDWARE, id="79-fallen-off-bus"),
        pytest.param(48, Action.WORKFLOW_XID_48, Cause.MEMORY, Cls.HARDWARE, id="48-dbe"),
        pytest.param(94, Action.RESTART_APP, Cause.MEMORY, Cls.HARDWARE, id="94-contained-ecc"),
        pytest.param(95, Action.RESET_GPU, Cause.MEMORY, Cls.HARDWARE, id="95-uncontained-ecc"),
        pytest.param(64, Action.RESET_GPU, Cause.MEMORY, Cls.HARDWARE, id="64-remap-failure"),
        pytest.param(63, Action.IGNORE, Cause.MEMORY, Cls.INFORMATIONAL, id="63-remap-recorded"),
        pytest.param(92, Action.IGNORE, Cause.MEMORY, Cls.INFORMATIONAL, id="92-sbe-rate"),
        pytest.param(13, Action.RESTART_APP, Cause.USER_APP, Cls.USER, id="13-gr-exception"),
        pytest.param(109, Action.RESET_GPU, Cause.USER_APP, Cls.USER, id="109-ctxsw-timeout"),
        pytest.param(69, Action.RESTART_APP, Cause.USER_APP, Cls.INFORMATIONAL, id="69-app-only"),
        pytest.param(74, Action.WORKFLOW_NVLINK_ERR, Cause.INTERCONNECT, Cls.HARDWARE, id="74"),
        pytest.param(119, Action.RESET_GPU, Cause.FIRMWARE, Cls.HARDWARE, id="119-gsp-timeout"),
        pytest.param(122, Action.CONTACT_SUPPORT, Cause.FIRMWARE, Cls.HARDWARE, id="122-spi"),
        pytest.param(137, Action.IGNORE, Cause.INTERCONNECT, Cls.INFORMATIONAL, id="137"),
        pytest.param(143, Action.RESET_GPU, Cause.FIRMWARE, Cls.HARDWARE, id="143-init-failure"),
        pytest.param(149, Action.WORKFLOW_NVLINK5_ERR, Cause.INTERCONNECT, Cls.HARDWARE, id="149"),
        pytest.param(154, Action.XID_154, Cause.INFORMATIONAL, Cls.HARDWARE, id="154-recovery"),
        pytest.param(167, None, Cause.BUS, Cls.HARDWARE, id="167-pcie-fatal-timeout"),
        pytest.param(1, Action.CONTACT_SUPPORT, Cause.DRIVER, Cls.INFORMATIONAL, id="1-unused"),
    ],
)
def test_entries_match_the_reference_and_the_class_rules(
    catalog: catalog_xid.XidCatalog,
    code: int,
    immediate: catalog_xid.ImmediateAction | None,
    cause: xid_model.CauseCategory,
    xid_class: xid_model.XidClass,
) -> None:
    entry = catalog.entry(code)
    assert (entry.immediate_action, entry.cause, entry.xid_class) == (immediate, cause, xid_class)
    assert catalog.is_hardware(code) is (xid_class is Cls.HARDWARE)


def test_unused_codes_are_named_so(catalog: catalog_xid.XidCatalog) -> None:
    unused = [code for code, cells in reference_rows().items() if cells[2] == "Unused"]
    assert unused, "the reference marks some codes unused"
    assert {catalog.entry(code).name for code in unused} == {"Unused/reserved"}


@pytest.mark.parametrize("code", [0, 173, 999, 5000], ids=lambda c: f"xid-{c}")
def test_unknown_codes_are_informational_and_flagged(
    catalog: catalog_xid.XidCatalog, code: int
) -> None:
    entry = catalog.entry(code)
    assert (entry.known, entry.name, entry.xid_class) == (
        False,
        f"Unknown Xid {code}",
        Cls.INFORMATIONAL,
    )
    assert not catalog.is_hardware(code)
    assert not catalog.is_user(code)


@pytest.mark.parametrize(
    ("code", "verdict"),
    [
        pytest.param(79, Verdict.POWER_CYCLE, id="79-power-cycle"),
        *(pytest.param(c, Verdict.GPU_RESET, id=f"{c}-gpu-reset") for c in (48, 94, 95, 119, 120)),
        pytest.param(143, Verdict.RMA, id="143-rma"),
        pytest.param(74, Verdict.HUMAN_DIAGNOSIS, id="74-human"),
        pytest.param(64, Verdict.HUMAN_DIAGNOSIS, id="64-human"),
        pytest.param(500, Verdict.HUMAN_DIAGNOSIS, id="unknown-human"),
    ],
)
def test_default_verdict_follows_the_seeds_precedence(
    code: int, verdict: decisions.Verdict
) -> None:
    assert catalog_xid.default_verdict(code) is verdict


def test_override_file_changes_classes_in_a_new_catalog(catalog: catalog_xid.XidCatalog) -> None:
    overridden = catalog_xid.load_catalog(FIXTURES / "cluster-overrides.yaml")

    assert overridden.xid_class(94) is Cls.HARDWARE
    assert overridden.xid_class(137) is Cls.USER
    assert overridden.xid_class(63) is Cls.HARDWARE
    assert overridden.user_codes() == catalog_xid.DEFAULT_USER_CODES | {137}
    entry = overridden.entry(137)
    assert (entry.overridden, entry.catalog_class) == (True, Cls.INFORMATIONAL)
    assert not overridden.entry(94).overridden
    assert catalog.xid_class(137) is Cls.INFORMATIONAL, "the packaged catalog is unchanged"
    assert catalog_xid.load_catalog().xid_class(63) is Cls.INFORMATIONAL


def test_override_can_class_a_code_the_catalog_does_not_know() -> None:
    overridden = catalog_xid.load_catalog(FIXTURES / "cluster-overrides.yaml")
    entry = overridden.entry(200)
    assert (entry.known, entry.xid_class) == (False, Cls.HARDWARE)
    assert 200 in overridden.hardware_codes()


def test_empty_override_file_overrides_nothing(catalog: catalog_xid.XidCatalog) -> None:
    loaded = catalog_xid.load_catalog(FIXTURES / "empty.yaml")
    assert loaded.user_codes() == catalog.user_codes()
    assert loaded.hardware_codes() == catalog.hardware_codes()


@pytest.mark.parametrize(
    ("fixture", "names"),
    [
        pytest.param("bad-code-not-integer.yaml", "classes entry 'xid94'", id="non-integer-code"),
        pytest.param("bad-code-out-of-range.yaml", "classes entry 1001", id="code-above-1000"),
        pytest.param("bad-code-zero.yaml", "classes entry 0", id="code-zero"),
        pytest.param("bad-code-bool.yaml", "classes entry True", id="yaml-yes-is-not-a-code"),
        pytest.param(
            "bad-class-name.yaml", "classes entry 48: unknown class 'broken'", id="bad-class"
        ),
        pytest.param("bad-yaml-syntax.yaml", "bad-yaml-syntax.yaml:3:7: invalid YAML", id="syntax"),
        pytest.param("bad-top-level-list.yaml", "top level must be a mapping", id="top-list"),
        pytest.param("bad-classes-list.yaml", "classes: expected a mapping", id="classes-list"),
        pytest.param("bad-unknown-key.yaml", "user: unknown key", id="unknown-key"),
        pytest.param("bad-duplicate-code.yaml", "key 137 is listed twice", id="duplicate-code"),
    ],
)
def test_bad_override_files_name_the_file_and_entry(fixture: str, names: str) -> None:
    path = FIXTURES / fixture
    with pytest.raises(CatalogError) as caught:
        catalog_xid.load_catalog(path)
    assert str(path) in str(caught.value)
    assert names in str(caught.value)


@pytest.mark.parametrize(
    "relative",
    [pytest.param("missing.yaml", id="missing-file"), pytest.param(".", id="a-directory")],
)
def test_unreadable_override_file_is_a_catalog_error_naming_it(
    tmp_path: Path, relative: str
) -> None:
    path = tmp_path / relative
    with pytest.raises(CatalogError, match="cannot read the Xid override file") as caught:
        overrides.read_class_overrides(path)
    assert str(path) in str(caught.value)


def catalog_json(*codes: int) -> str:
    entries = [
        json.dumps(
            {
                "code": code,
                "mnemonic": "M",
                "name": "N",
                "dcgm_message": "",
                "immediate_action": None,
                "investigatory_action": None,
                "cause": "driver",
                "class": "user",
            }
        )
        for code in codes
    ]
    return f'{{"about": "test", "entries": [{", ".join(entries)}]}}'


@pytest.mark.parametrize(
    ("text", "names"),
    [
        pytest.param("{", "not valid JSON", id="not-json"),
        pytest.param('{"about": "x", "entries": [{"code": 1}]}', "entries[0]", id="missing-keys"),
        pytest.param(catalog_json(7, 7), "entries[1]: Xid 7 listed twice", id="duplicate-code"),
        pytest.param(catalog_json(0), "entries[0].code", id="code-zero"),
    ],
)
def test_a_broken_catalog_file_is_a_catalog_error_naming_the_entry(text: str, names: str) -> None:
    with pytest.raises(CatalogError, match=r"^xid\.json: ") as caught:
        catalog_xid.parse_catalog_json(text, source="xid.json")
    assert names in str(caught.value)


def test_a_well_formed_catalog_file_parses() -> None:
    parsed = catalog_xid.parse_catalog_json(catalog_json(7, 8), source="xid.json")
    assert parsed.user_codes() == {7, 8}
