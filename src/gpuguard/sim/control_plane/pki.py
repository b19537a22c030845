"""The control plane's keys and certificates, made with the openssl command in its own folder.

A CA, the API server's serving certificate for 127.0.0.1/localhost (signed by that CA, so
clients verify it instead of skipping verification) and the service-account signing key pair
(`--service-account-signing-key-file`/`--service-account-key-file`, which TokenRequest and the
controller-manager's per-controller credentials need). Nothing is written outside ``folder``.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gpuguard.errors import GpuguardError


class PkiError(GpuguardError):
    """openssl is missing or refused a step."""


@dataclass(frozen=True, slots=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_pub: Path


def make(folder: Path) -> Pki:
    """Write a fresh CA, serving pair and service-account pair into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    openssl = shutil.which("openssl")
    if openssl is None:
        raise PkiError("the real control plane's certificates are made with openssl: none on PATH")
    pki = Pki(
        folder / "ca.crt",
        folder / "apiserver.crt",
        folder / "apiserver.key",
        folder / "sa.key",
        folder / "sa.pub",
    )
    ca_key = folder / "ca.key"
    csr = folder / "apiserver.csr"
    extensions = folder / "apiserver.ext"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    steps = [
        ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(ca_key)],
        [
            "req",
            "-x509",
            "-new",
            "-key",
            str(ca_key),
            "-subj",
            "/CN=gpuguard-test-ca",
            "-days",
            "2",
            "-out",
            str(pki.ca_cert),
        ],
        [
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            str(pki.serving_key),
        ],
        [
            "req",
            "-new",
            "-key",
            str(pki.serving_key),
            "-subj",
            "/CN=kube-apiserver",
            "-out",
            str(csr),
        ],
        [
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(pki.ca_cert),
            "-CAkey",
            str(ca_key),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            str(extensions),
            "-out",
            str(pki.serving_cert),
        ],
        [
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            str(pki.service_account_key),
        ],
        [
            "pkey",
            "-in",
            str(pki.service_account_key),
            "-pubout",
            "-out",
            str(pki.service_account_pub),
        ],
    ]
    for step in steps:
        done = subprocess.run([openssl, *step], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PkiError(f"openssl {step[0]} failed in {folder}: {done.stderr.strip()[-500:]}")
    return pki
