"""The repository stands alone: a clone with nothing beside it passes its tests.

No file of the repository names a place beside it, no symlink leads out of it, no module's path
constant points beside it, and (through the audit hook ``conftest`` installs) no test opens a
file beside it at run time.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path, PurePath
from types import ModuleType

import pytest

import gpuguard
from tests import selfcontained
from tests.selfcontained import REPO

# Spelt in pieces so that this file does not match the patterns it tests.
SIBLING = "sha" + "red"
HERE = "Path(__file__)"
PARENTS = "parents" + "["


def test_no_file_of_the_repository_names_a_place_beside_it() -> None:
    offenders = {
        str(path.relative_to(REPO)): found
        for path in selfcontained.content_files()
        if (text := selfcontained.text_of(path)) is not None
        and (found := selfcontained.outside_references(path, text))
    }
    assert offenders == {}


def test_no_symlink_leads_out_of_the_repository() -> None:
    links = [p for p in selfcontained.content_files() if p.is_symlink()]
    assert links, "the scenarios/ link is expected: the check must see symlinks"
    outside = [str(p) for p in links if not p.resolve().is_relative_to(REPO)]
    assert outside == []


def _modules(package: ModuleType, prefix: str) -> list[ModuleType]:
    names = [m.name for m in pkgutil.walk_packages(package.__path__, prefix)]
    return [importlib.import_module(n) for n in names if not n.endswith(".conftest")]


def test_no_module_constant_points_beside_the_repository() -> None:
    import tests

    modules = _modules(gpuguard, "gpuguard.") + _modules(tests, "tests.")
    beside = [
        f"{module.__name__}.{name} = {value}"
        for module in modules
        for name, value in vars(module).items()
        if isinstance(value, PurePath) and selfcontained.beside_repository(value)
    ]
    assert beside == []


def test_the_audit_hook_records_a_read_beside_the_repository() -> None:
    missing = REPO.parent / SIBLING / "no-such-file.txt"
    selfcontained.take_reads_beside()
    with pytest.raises(FileNotFoundError):
        missing.read_text()
    assert selfcontained.take_reads_beside() == [f"open {missing}"]


@pytest.mark.parametrize(
    ("relative", "line", "flagged"),
    [
        pytest.param("tests/unit/t.py", f"X = {HERE}.resolve().parents[2]", False, id="root"),
        pytest.param("tests/unit/t.py", f"X = {HERE}.resolve().{PARENTS}3]", True, id="above-root"),
        pytest.param(
            "tests/unit/t.py", f"X = {HERE}.resolve().parents[2].parent", True, id="mixed"
        ),
        pytest.param("tests/t.py", f"X = {HERE}.resolve().parents[2]", True, id="shallower"),
        pytest.param("tests/t.py", f"X = {HERE}.parent.parent", False, id="chain-root"),
        pytest.param("tests/t.py", f"X = {HERE}.parent.parent.parent", True, id="chain-up"),
        pytest.param("a.md", f"see ../{SIBLING}/data/x.txt", True, id="relative-sibling"),
        pytest.param("a.md", f"see {SIBLING}/data/x.txt", True, id="sibling-data"),
        pytest.param("a.py", f'X = ROOT / "{SIBLING}" / "data"', True, id="path-join"),
        pytest.param("a.md", f"data {SIBLING} by every layer", False, id="the-word"),
    ],
)
def test_references_beside_the_repository_are_recognised(
    relative: str, line: str, flagged: bool
) -> None:
    assert bool(selfcontained.outside_references(REPO / relative, line)) is flagged


@pytest.mark.parametrize(
    ("path", "beside"),
    [
        pytest.param(REPO / "tests" / "data" / "x", False, id="inside"),
        pytest.param(REPO.parent / SIBLING / "data" / "x", True, id="sibling"),
        pytest.param(REPO.parent / ".cache" / "x", False, id="hidden-sibling"),
        pytest.param(Path("/proc/self/status"), False, id="system"),
    ],
)
def test_paths_beside_the_repository_are_recognised(path: Path, beside: bool) -> None:
    assert selfcontained.beside_repository(path) is beside


ABSENT_CITATIONS = re.compile("DESIGN" + r" §\d|\b[Ss]eed" + r" 00\d")  # documents users lack


def test_code_and_docs_cite_only_what_the_repository_or_the_public_has() -> None:
    tops = ("src", "tests", "docs")
    citing = {
        str(path.relative_to(REPO)): found
        for path in selfcontained.content_files()
        if path.relative_to(REPO).parts[0] in tops
        and (text := selfcontained.text_of(path))
        and (found := [line for line in text.splitlines() if ABSENT_CITATIONS.search(line)])
    }
    assert citing == {}


TEST_MODULE_IMPORT = re.compile(
    r"^\s*(?:from|import)\s+tests\.\w+\.test_\w+|^\s*from\s+tests\.\w+\s+import\s+test_", re.M
)


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in helper modules (tests/builders.py and the like), so running or
    changing one test module never depends on another."""
    importing = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "tests").rglob("*.py"))
        if TEST_MODULE_IMPORT.search(path.read_text(encoding="utf-8"))
    ]
    assert importing == []


def test_a_clone_in_the_temporary_folder_may_use_it_for_scratch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI may clone straight into /tmp: pytest's, tempfile's and gpuguard's own scratch folders
    there are not beside the repository; a sibling folder still is."""
    temp = selfcontained._TEMP
    monkeypatch.setattr(selfcontained, "REPO", temp / "clone")
    for scratch in ("pytest-of-root", "tmpab12cd", "gpuguard-sim-x1y2", "gpuguard-demo-hosts-z"):
        assert not selfcontained.beside_repository(temp / scratch / "f"), scratch
    assert selfcontained.beside_repository(temp / SIBLING / "data")
