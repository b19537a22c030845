"""``actuators.redfish`` against a real Redfish emulator (sushy-tools' sushy-emulator, fake
driver): the power cycle goes Off then On; a wrong password (401), a missing system (404), a
BMC that refuses the power-off (400), one that never answers (timeout) and a node without a
Secret each end in ``ok=False`` with the reason, after one try (docs/remediation.md)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from gpuguard.actuators import redfish
from gpuguard.errors import NotFoundError
from tests import waits
from tests.integration import redfish_emulator as emu

NODE = "gpu-node-b"


def secrets(data: Mapping[str, Mapping[str, str]]) -> redfish.SecretReader:
    """The Secrets the controller may read, by name (a missing one: NotFoundError, as the
    API's 404)."""

    def read(name: str) -> Mapping[str, str]:
        if name not in data:
            raise NotFoundError(f"Secret gpuguard/{name} not found")
        return data[name]

    return read


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[emu.Bmc]:
    with emu.emulator(tmp_path_factory.mktemp("bmc"), (NODE, "gpu-node-c")) as running:
        yield running


def power(bmc: emu.Bmc, timeout_s: float = 30.0, **secret: str) -> redfish.RedfishPower:
    data = {"address": bmc.address, "username": emu.USER, "password": emu.PASSWORD} | secret
    return redfish.RedfishPower(secrets({"bmc-" + NODE: data}), {NODE: "bmc-" + NODE},
                                timeout_s=timeout_s, poll_s=0.5)  # fmt: skip


def test_a_power_cycle_turns_the_system_off_then_on(bmc: emu.Bmc) -> None:
    system = bmc.system_id(NODE)
    assert bmc.power_state(system) == "On"
    done = power(bmc, system=system).power_cycle(NODE, "rtx-5090")
    assert done.ok, done.detail
    # the emulator offers no PowerCycle reset type: ForceOff, seen Off, then On
    assert done.detail == f"system {system}: On -> ForceOff -> Off -> On"
    assert waits.eventually(lambda: bmc.power_state(system) == "On", 30, every_s=0.5)


def test_the_pools_secret_serves_a_node_without_its_own(bmc: emu.Bmc) -> None:
    data = {"address": bmc.address, "username": emu.USER, "password": emu.PASSWORD,
            "system": bmc.system_id("gpu-node-c")}  # fmt: skip
    control = redfish.RedfishPower(secrets({"bmc-pool": data}), {"rtx-5090": "bmc-pool"},
                                   timeout_s=30, poll_s=0.5)  # fmt: skip
    done = control.power_cycle("gpu-node-c", "rtx-5090")
    assert done.ok, done.detail


def test_a_wrong_password_is_refused_with_401(bmc: emu.Bmc) -> None:
    done = power(bmc, password="wrong").power_cycle(NODE, None)
    assert not done.ok
    assert done.detail.startswith(f"BMC {bmc.address} refused (401)")


def test_the_only_system_is_found_when_the_secret_names_none(bmc: emu.Bmc) -> None:
    done = power(bmc).power_cycle(NODE, None)  # two systems here: it must be named
    assert not done.ok
    assert "2 ComputerSystems: name one as `system` in the Secret" in done.detail


def test_a_missing_system_is_the_bmcs_404(bmc: emu.Bmc) -> None:
    done = power(bmc, system="no-such-system").power_cycle(NODE, None)
    assert not done.ok
    assert "404" in done.detail


def test_a_node_without_a_secret_is_not_power_cycled(bmc: emu.Bmc) -> None:
    done = power(bmc).power_cycle("gpu-node-z", "other-pool")
    assert (done.ok, done.detail) == (
        False, "no BMC Secret for node gpu-node-z or pool other-pool (remediation.bmc_secrets)")


def test_a_secret_without_a_password_names_what_is_missing(bmc: emu.Bmc) -> None:
    control = redfish.RedfishPower(secrets({"s": {"address": bmc.address, "username": "u"}}),
                                   {NODE: "s"})  # fmt: skip
    done = control.power_cycle(NODE, None)
    assert not done.ok
    assert "Secret s: no password" in done.detail


def test_a_bmc_that_refuses_the_power_off_says_so(tmp_path: Path) -> None:
    with emu.emulator(tmp_path, (NODE,), power_off_disabled=True) as locked:
        system = locked.system_id(NODE)
        done = power(locked, system=system).power_cycle(NODE, None)
        assert not done.ok
        assert done.detail.startswith(f"BMC {locked.address} answered 400")
        assert locked.power_state(system) == "On"  # nothing was done


def test_a_bmc_that_never_answers_times_out_once(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts the connection, never answers
        address = f"http://127.0.0.1:{silent.getsockname()[1]}"
        control = redfish.RedfishPower(
            secrets({"s": {"address": address, "username": "u", "password": "p"}}), {NODE: "s"},
            timeout_s=1.0,
        )  # fmt: skip
        started = time.monotonic()
        done = control.power_cycle(NODE, None)
        took = time.monotonic() - started
    assert not done.ok
    assert done.detail.startswith(f"BMC {address}: ")
    assert "timed out" in done.detail.lower() or "timeout" in done.detail.lower()
    assert took < 20  # one try (sushy's retries of server errors are off), not a loop
