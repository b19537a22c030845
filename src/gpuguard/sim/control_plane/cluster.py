"""Start the real control plane on loopback for tests and `sim serve --control-plane real`.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler from the pinned build
(``build.py``), every file in one folder, every port picked free on 127.0.0.1, stopped in
reverse order on exit. The flags follow what controller-runtime's envtest passes
(`pkg/internal/testing/controlplane`) plus what gpuguard's own objects need:

- authorization ``Node,RBAC``; admission ``NodeRestriction`` on top of the defaults, so
  ValidatingAdmissionPolicy (GA since 1.30) judges every request as in a production cluster;
- service-account token signing (TokenRequest): the controller runs with its own
  ServiceAccount's token and the agent with a pod-bound token that carries its node
  (``authentication.kubernetes.io/node-name``, 1.30+);
- ``resource.k8s.io`` served with the ``DRADeviceTaintRules`` gate, for gpuguard's
  DeviceTaintRules;
- static bearer tokens for the people and components (``--token-auth-file``): ``admin``
  (``system:masters``), the controller-manager and the scheduler;
- the controller-manager runs the Job, TTL-after-finished, PodGC, garbage-collector, node
  lifecycle and disruption controllers (its defaults) with per-controller credentials.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuguard.errors import GpuguardError
from gpuguard.sim import live
from gpuguard.sim.control_plane import pki, versions

_READY_TIMEOUT_S = 60.0
_START_ATTEMPTS = 3  # a start whose picked port was taken meanwhile is made again
SERVICE_CIDR = "10.96.0.0/16"
FEATURE_GATES = "DRADeviceTaints=true,DRADeviceTaintRules=true"
RUNTIME_CONFIG = "resource.k8s.io/v1beta2=true,resource.k8s.io/v1alpha3=true"


class ControlPlaneError(GpuguardError):
    """A part of the real control plane is not built or did not start."""


class PortTaken(ControlPlaneError):
    """A component exited because the port picked for it was bound by then."""


@dataclass
class ControlPlane:
    """A running control plane: its URL, CA, the admin's token and kubeconfig."""

    folder: Path
    server: str
    ca_cert: Path
    admin_token: str
    kubeconfig: Path
    bin_dir: Path
    started_s: dict[str, float] = field(default_factory=dict)
    # one kept-alive connection per thread: a TLS handshake per request cost ~10 ms
    _connections: threading.local = field(default_factory=threading.local, repr=False)
    _opened: list[http.client.HTTPSConnection] = field(default_factory=list, repr=False)

    def kubectl(
        self,
        *args: str,
        as_user: str | None = None,
        stdin: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this control plane (as ``as_user``, impersonated)."""
        argv = [str(self.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig or self.kubeconfig}"]
        if as_user:
            argv.append(f"--as={as_user}")
        done = subprocess.run(
            [*argv, *args], input=stdin, capture_output=True, text=True, check=False, timeout=120
        )
        if check and done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {done.stderr.strip()[-1500:]}")
        return done

    def _send(
        self, method: str, path: str, headers: list[tuple[str, str]], data: bytes | None
    ) -> tuple[http.client.HTTPResponse, bytes]:
        connection = getattr(self._connections, "kept", None)
        if connection is None:
            url = urllib.parse.urlsplit(self.server)
            connection = http.client.HTTPSConnection(
                url.hostname or "",
                url.port,
                timeout=30,
                context=ssl.create_default_context(cafile=str(self.ca_cert)),
            )
            self._connections.kept = connection
            self._opened.append(connection)
        try:
            connection.putrequest(method, path)
            for name, value in headers:
                connection.putheader(name, value)
            connection.endheaders(data)
            answer = connection.getresponse()
            return answer, answer.read()
        except BaseException:
            connection.close()
            self._connections.kept = None
            raise

    def close(self) -> None:
        """Close the kept-alive connections (every thread's)."""
        for connection in self._opened:
            connection.close()
        self._opened.clear()

    def write_kubeconfig(self, path: Path, token: str, name: str) -> Path:
        """A kubeconfig for ``token`` against this control plane."""
        path.write_text(kubeconfig(self.server, self.ca_cert, token, name))
        return path

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        content_type: str = "application/json",
        as_user: tuple[str, ...] = (),
        extra: dict[str, list[str]] | None = None,
    ) -> tuple[int, Any]:
        """One HTTP request to the API server; the status and the decoded JSON body.
        ``as_user``: the user and groups to impersonate (the admin may), with ``extra``
        attributes (one header line per group and per value, as impersonation reads them:
        http.client, since urllib keeps one value per header name)."""
        data = None if body is None else json.dumps(body).encode()
        headers = [
            ("Authorization", f"Bearer {token or self.admin_token}"),
            ("Content-Type", content_type),
            ("Accept", "application/json"),
        ]
        if as_user:
            headers.append(("Impersonate-User", as_user[0]))
            headers += [("Impersonate-Group", group) for group in as_user[1:]]
            headers += [
                ("Impersonate-Extra-" + urllib.parse.quote(key, safe=""), value)
                for key, values in (extra or {}).items()
                for value in values
            ]
        headers.append(("Content-Length", str(len(data or b""))))
        try:
            answer, raw = self._send(method, path, headers, data)
        except (http.client.RemoteDisconnected, ConnectionError, ssl.SSLEOFError):
            # The server closed a kept-alive connection (idle, or between TLS records, which
            # the write sees as an EOF): the request never reached it, so once more.
            self._connections.kept = None
            answer, raw = self._send(method, path, headers, data)
        try:
            return answer.status, json.loads(raw or b"null")
        except ValueError:
            return answer.status, raw.decode(errors="replace")

    def pod_bound_token(
        self, namespace: str, account: str, pod: dict[str, Any], seconds: int = 86400
    ) -> str:
        """A token of ``account`` bound to ``pod``, requested as its node's kubelet requests
        it (the API server puts the pod's name, uid and node in it; NodeRestriction lets a
        kubelet ask only for the pods on its node)."""
        node = pod["spec"]["nodeName"]
        status, answer = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "expirationSeconds": seconds,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod["metadata"]["name"],
                        "uid": pod["metadata"]["uid"],
                    },
                },
            },
            as_user=(f"system:node:{node}", "system:nodes", "system:authenticated"),
        )
        if status != 201:
            raise ControlPlaneError(
                f"token for {namespace}/{account} bound to pod "
                f"{pod['metadata']['name']}: {status} {answer}"
            )
        return str(answer["status"]["token"])


def kubeconfig(server: str, ca_cert: Path, token: str, name: str) -> str:
    """A kubeconfig with the server's CA and a bearer token."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": name, "cluster": {"server": server, "certificate-authority": str(ca_cert)}}
            ],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        },
        sort_keys=False,
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS's pick)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def require_built(
    bin_dir: Path | None = None,
    tools: Sequence[versions.Tool] = (*versions.KUBERNETES_TOOLS, versions.ETCD_TOOL),
) -> Path:
    """The pinned build's bin folder; ControlPlaneError naming the missing tools otherwise."""
    from gpuguard.sim.control_plane import build  # the build module shells out to go; lazy

    where = bin_dir or versions.bin_dir()
    missing = build.missing_tools(where, tools)
    if missing:
        raise ControlPlaneError(
            f"the real control plane is not built ({', '.join(missing)} missing in {where}): "
            "run `scripts/control-plane build` (a cold build takes ~30 min on 2 cores)"
        )
    return where


@contextmanager
def start(
    folder: Path,
    *,
    controllers: bool = True,
    scheduler: bool = True,
    extra_apiserver_flags: Sequence[str] = (),
) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver (+ controller-manager, scheduler); all stopped on exit.

    A port picked free (``free_port``) can be bound by someone else before its component
    binds it: the source port of any outgoing connection, another plane starting beside this
    one. Such a start is stopped and made again on fresh ports, with a fresh etcd."""
    for attempt in range(1, _START_ATTEMPTS + 1):
        stack = ExitStack()
        try:
            plane = stack.enter_context(
                _started(folder, controllers, scheduler, extra_apiserver_flags)
            )
        except PortTaken:
            stack.close()
            if attempt == _START_ATTEMPTS:
                raise
            shutil.rmtree(folder / "etcd", ignore_errors=True)
            continue
        with stack:
            yield plane
        return


@contextmanager
def _started(
    folder: Path, controllers: bool, scheduler: bool, extra_apiserver_flags: Sequence[str]
) -> Iterator[ControlPlane]:
    bin_dir = require_built()
    folder.mkdir(parents=True, exist_ok=True)
    keys = pki.make(folder / "pki")
    tokens = {name: secrets.token_hex(16) for name in ("admin", "controller-manager", "scheduler")}
    (folder / "tokens.csv").write_text(
        f'{tokens["admin"]},admin,admin-uid,"system:masters"\n'
        f"{tokens['controller-manager']},system:kube-controller-manager,kcm-uid\n"
        f"{tokens['scheduler']},system:kube-scheduler,sched-uid\n"
    )
    with ExitStack() as stack:
        timings: dict[str, float] = {}
        began = time.monotonic()
        etcd_url = stack.enter_context(_etcd(bin_dir, folder))
        timings["etcd"] = round(time.monotonic() - began, 2)
        port = free_port()
        server = f"https://127.0.0.1:{port}"
        stack.enter_context(
            _process(
                "kube-apiserver",
                [
                    str(bin_dir / "kube-apiserver"),
                    *_apiserver_flags(folder, keys, etcd_url, port),
                    *extra_apiserver_flags,
                ],
                folder,
                lambda: _healthy(server, keys.ca_cert, tokens["admin"], "/readyz"),
            )
        )
        timings["kube-apiserver"] = round(time.monotonic() - began, 2)
        plane = ControlPlane(
            folder,
            server,
            keys.ca_cert,
            tokens["admin"],
            folder / "admin.kubeconfig",
            bin_dir,
            timings,
        )
        plane.write_kubeconfig(plane.kubeconfig, tokens["admin"], "gpuguard-real")
        if controllers:
            _component(
                stack,
                plane,
                "kube-controller-manager",
                tokens["controller-manager"],
                [
                    f"--service-account-private-key-file={keys.service_account_key}",
                    f"--root-ca-file={keys.ca_cert}",
                    "--use-service-account-credentials=true",
                    f"--cluster-signing-cert-file={keys.ca_cert}",
                    "--controllers=*,-tokencleaner,-bootstrapsigner,-csrsigning",
                ],
            )
            timings["kube-controller-manager"] = round(time.monotonic() - began, 2)
        if scheduler:
            _component(stack, plane, "kube-scheduler", tokens["scheduler"], [])
            timings["kube-scheduler"] = round(time.monotonic() - began, 2)
        try:
            yield plane
        finally:
            plane.close()


def _component(
    stack: ExitStack, plane: ControlPlane, name: str, token: str, flags: list[str]
) -> None:
    """A controller-manager or scheduler: its kubeconfig, loopback serving, no election."""
    config = plane.write_kubeconfig(plane.folder / f"{name}.kubeconfig", token, name)
    stack.enter_context(
        _process(
            name,
            [
                str(plane.bin_dir / name),
                f"--kubeconfig={config}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--feature-gates={FEATURE_GATES}",
                *flags,
            ],
            plane.folder,
            None,
        )
    )


def _apiserver_flags(folder: Path, keys: pki.Pki, etcd_url: str, port: int) -> list[str]:
    return [
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={keys.serving_cert}",
        f"--tls-private-key-file={keys.serving_key}",
        f"--cert-dir={folder / 'apiserver-certs'}",
        f"--token-auth-file={folder / 'tokens.csv'}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={keys.service_account_pub}",
        f"--service-account-signing-key-file={keys.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        f"--feature-gates={FEATURE_GATES}",
        f"--runtime-config={RUNTIME_CONFIG}",
        "--endpoint-reconciler-type=none",
        "--disable-http2-serving",
    ]


@contextmanager
def _etcd(bin_dir: Path, folder: Path) -> Iterator[str]:
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    with _process(
        "etcd",
        [
            str(bin_dir / "etcd"),
            f"--data-dir={folder / 'etcd'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync",
            "--quota-backend-bytes=1073741824",
            "--log-level=warn",
        ],
        folder,
        lambda: _plain_ok(f"{url}/health"),
    ):
        yield url


@contextmanager
def _process(
    name: str, argv: list[str], folder: Path, ready: Any
) -> Iterator[subprocess.Popen[bytes]]:
    log_path = folder / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
            env={**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", "2")},
        )
    try:
        _wait(name, proc, ready, log_path)
        yield proc
    finally:
        live.stop(proc)


def _wait(name: str, proc: subprocess.Popen[bytes], ready: Any, log_path: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            log = log_path.read_text(errors="replace")
            tail = log.strip().splitlines()[-3:]
            error = PortTaken if "address already in use" in log else ControlPlaneError
            raise error(
                f"{name} exited with {proc.returncode}: {' | '.join(tail)} (log: {log_path})"
            )
        if ready is None or ready():
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"{name} not ready after {_READY_TIMEOUT_S:.0f}s (log: {log_path})"
            )
        time.sleep(0.1)


def _plain_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _healthy(server: str, ca_cert: Path, token: str, path: str) -> bool:
    req = urllib.request.Request(server + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(
            req, context=ssl.create_default_context(cafile=str(ca_cert)), timeout=1
        ) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False
