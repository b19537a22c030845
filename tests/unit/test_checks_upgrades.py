"""auto-upgrade and package-pin: APT settings as APT reads them, blacklists as u-u matches them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.agent.checks import (
    apt_config,
    dpkg,
    hostfs,
    registry,
    result,
    running,
    settings,
    upgrades,
)
from gpuguard.model.decisions import CheckStatus
from tests.unit import hosttree
from tests.unit.hosttree import HostTree

INSTALLED = "install ok installed"
HELD = "hold ok installed"
GPU_WORKER_PACKAGES = {
    "linux-image-5.15.0-179-generic": INSTALLED,
    "linux-modules-5.15.0-179-generic": INSTALLED,
    "linux-firmware": INSTALLED,
    "linux-libc-dev": INSTALLED,
    "nvidia-driver-580": INSTALLED,
    "nvidia-kernel-common-580": INSTALLED,
    "libnvidia-compute-580": INSTALLED,
    "libnvidia-ml-dev": "deinstall ok config-files",  # removed: nothing to protect
    "bash": INSTALLED,
}


def test_apt_syntax_nesting_lists_comments_and_order(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("etc/apt/apt.conf.d/10periodic", 'APT { Periodic { Unattended-Upgrade "1"; }; };\n')
    tree.write(
        "etc/apt/apt.conf.d/50unattended-upgrades",
        "/* block\n comment */\n# hash comment\n"
        'Unattended-Upgrade::Package-Blacklist {\n  "nvidia-"; // trailing\n//  "vim";\n};\n',
    )
    tree.write("etc/apt/apt.conf.d/60local", 'Unattended-Upgrade::Package-Blacklist:: "linux-";\n')
    tree.write("etc/apt/apt.conf.d/99zz.dpkg-old", 'APT::Periodic::Unattended-Upgrade "7";\n')
    tree.write("etc/apt/apt.conf", 'apt::periodic::unattended-upgrade "2";\n')

    config = apt_config.load(tmp_path)

    assert config.scalar("APT::Periodic::Unattended-Upgrade") == ("2", "/etc/apt/apt.conf")
    assert config.items(upgrades.BLACKLIST_KEY) == ["nvidia-", "linux-"]
    assert "/etc/apt/apt.conf.d/99zz.dpkg-old" not in config.files


def test_apt_clear_directive_empties_a_list(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_apt(tree, periodic="1", blacklist=["nvidia-"])
    tree.write("etc/apt/apt.conf.d/99clear", "#clear Unattended-Upgrade::Package-Blacklist;\n")
    assert apt_config.load(tmp_path).items(upgrades.BLACKLIST_KEY) == []


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('Foo::Bar {\n "x";\n', id="unclosed-brace"),
        pytest.param('Foo::Bar "x";\n};\n', id="stray-brace"),
        pytest.param('Foo::Bar "unterminated;\n', id="unterminated-string"),
    ],
)
def test_malformed_apt_file_is_an_error_naming_it(tmp_path: Path, text: str) -> None:
    HostTree(tmp_path).write("etc/apt/apt.conf.d/50broken", text)
    with pytest.raises(hostfs.HostReadError, match=r"/etc/apt/apt\.conf\.d/50broken"):
        apt_config.load(tmp_path)


@pytest.mark.parametrize(
    ("periodic", "extra", "expected"),
    [
        pytest.param("1", "", CheckStatus.WARN, id="on-is-warn-never-fail"),
        pytest.param("0", "", CheckStatus.PASS, id="oct14-gpu-nodes-off"),
        pytest.param(None, "", CheckStatus.PASS, id="not-configured"),
        pytest.param("1", 'APT::Periodic::Enable "0";\n', CheckStatus.PASS, id="periodic-disabled"),
        pytest.param(
            "1",
            'APT::Periodic::Unattended-Upgrade "0";\n',
            CheckStatus.PASS,
            id="later-file-turns-it-off",
        ),
    ],
)
def test_auto_upgrade(
    tmp_path: Path, periodic: str | None, extra: str, expected: CheckStatus
) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_apt(tree, periodic=periodic)
    if extra:
        tree.write("etc/apt/apt.conf.d/99local", extra)
    outcome = upgrades.check_auto_upgrade(tmp_path)
    assert outcome.status is expected
    if expected is CheckStatus.WARN:
        assert "/etc/apt/apt.conf.d/20auto-upgrades" in outcome.evidence
        assert outcome.fix is not None


def test_auto_upgrade_on_a_host_without_apt_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(hostfs.HostReadError, match="/etc/apt: not found"):
        upgrades.check_auto_upgrade(tmp_path)


@pytest.mark.parametrize(
    ("periodic", "blacklist", "holds", "expected", "named"),
    [
        pytest.param("0", [], {}, CheckStatus.PASS, [], id="unattended-off"),
        pytest.param(
            "1",
            ["nvidia-", "linux-image-", "linux-modules-"],
            {},
            CheckStatus.FAIL,
            ["libnvidia-compute-580"],
            id="july25-nvidia-dash-misses-libnvidia",
        ),
        pytest.param(
            "1",
            ["linux-", "nvidia-", "libnvidia-"],
            {},
            CheckStatus.WARN,
            ["linux-firmware", "linux-libc-dev"],
            id="linux-dash-over-broad",
        ),
        pytest.param(
            "1",
            ["linux-image-", "linux-modules-", "nvidia-", "libnvidia-"],
            {},
            CheckStatus.PASS,
            [],
            id="seed-blacklist-narrowed",
        ),
        pytest.param(
            "1",
            ["nvidia-"],
            {
                "libnvidia-compute-580": HELD,
                "linux-image-5.15.0-179-generic": HELD,
                "linux-modules-5.15.0-179-generic": HELD,
            },
            CheckStatus.PASS,
            [],
            id="held-packages-are-protected",
        ),
        pytest.param(
            "1",
            [".*nvidia"],
            {"linux-image-5.15.0-179-generic": HELD, "linux-modules-5.15.0-179-generic": HELD},
            CheckStatus.PASS,
            [],
            id="regex-wildcard-covers-libnvidia",
        ),
        pytest.param(
            "1",
            [],
            {},
            CheckStatus.FAIL,
            ["libnvidia-compute-580", "linux-image-5.15.0-179-generic", "nvidia-driver-580"],
            id="may21-nothing-pinned",
        ),
    ],
)
def test_package_pin(
    tmp_path: Path,
    periodic: str,
    blacklist: list[str],
    holds: dict[str, str],
    expected: CheckStatus,
    named: list[str],
) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_apt(tree, periodic=periodic, blacklist=blacklist)
    hosttree.with_dpkg(tree, {**GPU_WORKER_PACKAGES, **holds})
    outcome = upgrades.check_package_pin(tmp_path)
    assert outcome.status is expected
    for name in named:
        assert name in outcome.evidence
    assert "libnvidia-ml-dev" not in outcome.evidence
    if expected is CheckStatus.FAIL:
        assert outcome.fix is not None
        assert "apt-mark hold" in outcome.fix


def test_package_pin_suggests_the_missing_blacklist_entry(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_apt(tree, periodic="1", blacklist=["nvidia-", "linux-"])
    hosttree.with_dpkg(tree, GPU_WORKER_PACKAGES)
    outcome = upgrades.check_package_pin(tmp_path)
    assert outcome.fix is not None
    assert '"libnvidia-";' in outcome.fix


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        pytest.param(
            lambda t: hosttree.with_apt(t, periodic="1", blacklist=["nvidia-"]),
            "/var/lib/dpkg/status: not found",
            id="no-dpkg-status",
        ),
        pytest.param(
            lambda t: (
                hosttree.with_apt(t, periodic="1", blacklist=["nvidia-("]),
                hosttree.with_dpkg(t, GPU_WORKER_PACKAGES),
            ),
            "not a valid regex",
            id="bad-regex",
        ),
        pytest.param(
            lambda t: (
                hosttree.with_apt(t, periodic="1"),
                hosttree.with_dpkg(t, {"nvidia-driver-580": "installed"}),
            ),
            "malformed Status",
            id="garbled-status",
        ),
    ],
)
def test_package_pin_unreadable_inputs_are_errors(
    tmp_path: Path, setup: object, message: str
) -> None:
    setup(HostTree(tmp_path))  # type: ignore[operator]
    with pytest.raises(hostfs.HostReadError, match=message):
        upgrades.check_package_pin(tmp_path)


def test_dpkg_status_holds_and_states() -> None:
    packages = dpkg.parse_status(
        "Package: a\nStatus: hold ok installed\n\n"
        "Package: b\nStatus: install ok config-files\nDescription: x\n multi: line\n"
    )
    assert [(p.name, p.held, p.installed) for p in packages] == [
        ("a", True, True),
        ("b", False, False),
    ]


INCIDENT = Path(__file__).resolve().parents[1] / "data" / "hosts" / "autoupdate-incident"


@pytest.mark.parametrize(("driver", "kernel", "status", "named"), [
    ("580.126.09", None, CheckStatus.FAIL, "nvidia-driver-580 580.159.03"),  # apt moved it
    (None, "5.15.0-176-generic", CheckStatus.FAIL, "5.15.0-179-generic boot next"),
    (None, "5.15.0-181-generic", CheckStatus.FAIL, "not installed"),
    ("580.159.03", "5.15.0-179-generic", None, None),  # at the declared versions: pins decide
])
def test_package_pin_reports_drift_from_the_declared_versions(
    driver: str | None, kernel: str | None, status: CheckStatus | None, named: str | None
) -> None:
    found = upgrades.check_package_pin(INCIDENT, driver, kernel)
    if status is None:
        assert found == upgrades.check_package_pin(INCIDENT)
        return
    assert found.status is status
    assert "drift" in found.evidence
    assert named in found.evidence


def _package_pin(checks: settings.CheckSettings) -> result.CheckResult:
    pin = next(c for c in registry.CHECKS if c.name == upgrades.PACKAGE_PIN)
    return running.run_one(pin, registry.CheckContext(INCIDENT, checks, hosttree.FakeRunner()))


def test_a_new_declaration_in_the_mounted_directory_is_read_at_the_next_run(
    tmp_path: Path,
) -> None:
    checks = settings.CheckSettings(driver_version="580.159.03", declared_dir=tmp_path)
    assert _package_pin(checks) == upgrades.check_package_pin(INCIDENT)  # the flag's version
    (tmp_path / "driver").write_text("580.126.09\n")  # the kubelet refreshed the ConfigMap
    drifted = _package_pin(checks)
    assert drifted.status is CheckStatus.FAIL
    assert "(declared 580.126.09)" in drifted.evidence
    (tmp_path / "kernel").write_text("5.15.0-181-generic")
    assert "5.15.0-181-generic not installed" in _package_pin(checks).evidence


def test_a_declared_version_that_is_no_version_makes_package_pin_unknown(
    tmp_path: Path,
) -> None:
    (tmp_path / "driver").write_text("580; rm -rf /")
    found = _package_pin(settings.CheckSettings(declared_dir=tmp_path))
    assert found.status is CheckStatus.UNKNOWN
    assert "driver: " in found.evidence
    assert "is not a package version" in found.evidence
