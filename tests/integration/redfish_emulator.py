"""A real Redfish BMC for the tests: OpenStack's ``sushy-emulator`` (sushy-tools, a dev extra)
with its fake driver (``--fake``: systems kept in memory, power changes applied 1-11 s after
the request, as a real BMC's are not immediate), HTTP basic auth from an htpasswd file
(bcrypt), on a free loopback port. Not a hand-written fake: the Redfish resources and the
``ComputerSystem.Reset`` action are the emulator's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import httpx

from tests import waits
from tests.integration.prometheus import free_port

USER, PASSWORD = "gpuguard", "power-only"


@dataclass(frozen=True)
class Bmc:
    address: str
    systems: tuple[str, ...]  # the fake systems' names (their Redfish Ids are UUIDs)

    def power_state(self, system: str) -> str:
        """The system's power state as the emulator reports it now."""
        with httpx.Client(auth=(USER, PASSWORD), timeout=10) as client:
            answer = client.get(f"{self.address}/redfish/v1/Systems/{system}")
            answer.raise_for_status()
            state: str = answer.json()["PowerState"]
            return state

    def system_id(self, name: str) -> str:
        with httpx.Client(auth=(USER, PASSWORD), timeout=10) as client:
            members = client.get(f"{self.address}/redfish/v1/Systems").json()["Members"]
            for member in members:
                body = client.get(f"{self.address}{member['@odata.id']}").json()
                if body["Name"] == name:
                    return str(body["Id"])
        raise AssertionError(f"no system {name} at {self.address}")


def emulator_binary() -> str:
    """sushy-emulator beside this Python (the dev extra installs it)."""
    found = Path(sys.executable).with_name("sushy-emulator")
    path = str(found) if found.is_file() else shutil.which("sushy-emulator")
    assert path, "sushy-emulator is missing: pip install -e '.[dev]' (sushy-tools)"
    return path


@contextmanager
def emulator(
    directory: Path, systems: tuple[str, ...], *, power_off_disabled: bool = False
) -> Iterator[Bmc]:
    """sushy-emulator --fake serving ``systems`` (each powered On) until the ``with`` ends;
    ``power_off_disabled``: the emulator refuses ForceOff (400), as a BMC locked by policy."""
    port = free_port()
    htpasswd = directory / "htpasswd"
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    htpasswd.write_text(f"{USER}:{hashed}\n")
    fake = [
        {"uuid": f"27946b59-9e44-4fa7-8e91-f3527a1ef{i:03d}", "name": name, "power_state": "On",
         "external_notifier": False, "nics": []}
        for i, name in enumerate(systems)
    ]  # fmt: skip
    config = directory / "emulator.conf"
    config.write_text(
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {fake!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(directory / 'state')!r}\n"
        f"SUSHY_EMULATOR_DISABLE_POWER_OFF = {power_off_disabled!r}\n"
    )
    argv = [emulator_binary(), "--config", str(config), "--fake", "-i", "127.0.0.1",
            "-p", str(port)]  # fmt: skip
    log = (directory / "emulator.log").open("w")
    with subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ)) as proc:
        try:
            bmc = Bmc(f"http://127.0.0.1:{port}", systems)
            assert waits.eventually(lambda: _answers(bmc.address), 30), (
                f"sushy-emulator did not answer: {(directory / 'emulator.log').read_text()[-2000:]}"
            )
            yield bmc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def _answers(address: str) -> bool:
    try:
        return httpx.get(f"{address}/redfish/v1/", timeout=2).status_code in (200, 401)
    except httpx.HTTPError:
        return False
