"""GPU health stack and system-pod rules: dcgm-exporter coverage (and the DCGM fields it does
not collect), Xid alerts built on the wrong series, device-plugin versions and settings that
fail or blind allocation, kube-proxy skew and mode, and CoreDNS forwarding."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from gpuguard.catalog import dcgm_fields
from gpuguard.model import metric_names as names
from gpuguard.model.audit import AuditView, Input, Obj, Severity
from gpuguard.policy.audit import kube
from gpuguard.policy.audit.nodes import skew_problem
from gpuguard.policy.audit.registry import Hit, NotChecked

DCGM_PODS = ("dcgm-exporter",)
DEVICE_PLUGIN_PODS = ("nvidia-device-plugin", "device-plugin")
KUBE_PROXY_PODS = ("kube-proxy",)


# DCGM-1 -----------------------------------------------------------------------------------


def dcgm_coverage(view: AuditView) -> Iterable[Hit] | NotChecked:
    exporters = kube.pods_named(view, *DCGM_PODS)
    reporting = view.prom_nodes.get(Input.PROM_DCGM_NODES)
    if not exporters and reporting is None:
        return NotChecked("no dcgm-exporter pod found and no Prometheus answer for its series")
    ready = {kube.node_of(p) for p in exporters if kube.is_ready(p)}
    hits = []
    for node in kube.gpu_nodes(view):
        node_name = kube.name(node)
        gaps = []
        if exporters and node_name not in ready:
            gaps.append("no Ready dcgm-exporter pod")
        if reporting is not None and node_name not in reporting:
            gaps.append(_no_series(node_name, ready))
        if gaps:
            hits.append(Hit(Severity.HIGH, (kube.ref("Node", node),),
                            "; ".join(gaps) + ": GPU faults on this node are not seen"))
    return hits


def _no_series(node: str, ready: set[str | None]) -> str:
    if node in ready:  # the exporter runs and answers, but with no GPU in it
        return ("its Ready dcgm-exporter answers with zero GPUs (no series in Prometheus: "
                "NVML not found, or no GPU visible to the pod)")
    return "no dcgm-exporter series in Prometheus"


# DCGM-3 -----------------------------------------------------------------------------------


def fields_not_collected(view: AuditView) -> Iterable[Hit] | NotChecked:
    """Each DCGM field gpuguard reads that Prometheus has no series of, with what goes blind."""
    present = view.prom_series
    if not any(name.startswith("DCGM_") for name in present):
        return NotChecked("no dcgm-exporter series in Prometheus at all (see DCGM-1)")
    return [
        Hit(Severity.MEDIUM, (f"Prometheus/{field.name}",),
            f"{field.name} is not collected"
            f"{'' if field.default else ' (not in dcgm-exporter default counters)'}: "
            f"blind: {field.blind}",
            fix="deploy the chart's gpuguard-dcgm-counters ConfigMap as dcgm-exporter's "
                "counters file (values dcgmExporter.counters)")
        for field in dcgm_fields.not_collected(present)
    ]


# DCGM-2 -----------------------------------------------------------------------------------

_RATE_OF_GAUGE = re.compile(
    r"\b(increase|rate|irate|changes|resets|delta|idelta)\s*\(\s*"
    + names.DCGM_XID_LAST + r"\b"
)
_XID_SERIES = (names.DCGM_XID_LAST, names.DCGM_XID_COUNT, names.XID_TOTAL)


def xid_alerts(view: AuditView) -> Iterator[Hit]:
    counted = names.DCGM_XID_COUNT in view.prom_series
    for rule in view.prom_rules:
        if _RATE_OF_GAUGE.search(rule.expr):
            severity = Severity.MEDIUM if counted else Severity.HIGH
            tail = "" if counted else f"; {names.DCGM_XID_COUNT} is not collected either"
            yield Hit(severity, (f"PrometheusRule/{rule.group}/{rule.name}",),
                      f"{rule.expr!r} applies a rate to {names.DCGM_XID_LAST}, a gauge holding "
                      f"the LAST Xid: a repeat of the same Xid never increases it{tail}")
    if not any(s in r.expr for r in view.prom_rules for s in _XID_SERIES):
        yield Hit(Severity.MEDIUM, ("Prometheus/rules",),
                  f"no loaded rule reads {', '.join(_XID_SERIES)}: no Xid is alerted",
                  fix="load gpuguard's rules (deploy/helm: PrometheusRule) or alert on "
                      f"{names.DCGM_XID_COUNT} / {names.XID_TOTAL}")


# DP-1 -------------------------------------------------------------------------------------

AFFECTED = ((0, 17, 0), (0, 20, 0))  # alignedAlloc on every GPU, k8s-device-plugin#2038
_ADMISSION = "UnexpectedAdmissionError"
_PREFERRED = "GetPreferredAllocation"


def device_plugin_version(view: AuditView) -> Iterable[Hit] | NotChecked:
    hits = list(_admission_failures(view))
    plugins = kube.pods_named(view, *DEVICE_PLUGIN_PODS)
    versions = {kube.ref("Pod", p): _plugin_version(p) for p in plugins}
    for policy in view.of(Input.CLUSTER_POLICIES):
        shown = str((kube.spec(policy).get("devicePlugin") or {}).get("version") or "")
        versions[kube.ref("ClusterPolicy", policy)] = kube.version(shown)
    known = {k: v for k, v in versions.items() if v is not None}
    for where, found in sorted(known.items()):
        if AFFECTED[0] <= found <= AFFECTED[1]:
            hits.append(Hit(Severity.MEDIUM, (where,), f"device plugin v{dotted(found)}: one "
                            "GPU off the bus fails every allocation on the node"))
    if not known and not hits:
        why = "no device plugin pod found" if not plugins else (
            "the device plugin's image tags carry no version")
        return NotChecked(why)
    return hits


def dotted(found: tuple[int, int, int]) -> str:
    return ".".join(map(str, found))


def _plugin_version(pod: Obj) -> tuple[int, int, int] | None:
    for container in kube.containers(pod):
        found = kube.version(kube.image_tag(str(container.get("image") or "")))
        if found is not None:
            return found
    return None


def _admission_failures(view: AuditView) -> Iterator[Hit]:
    failed: dict[str, list[str]] = {}
    for pod in view.of(Input.PODS):
        said = f"{kube.status(pod).get('reason')} {kube.status(pod).get('message')}"
        if _ADMISSION in said and _PREFERRED in said:
            failed.setdefault(str(kube.node_of(pod)), []).append(kube.ref("Pod", pod))
    for event in view.of(Input.EVENTS):
        if event.get("reason") == _ADMISSION and _PREFERRED in str(event.get("message")):
            involved = event.get("involvedObject") or {}
            failed.setdefault(str(event.get("source", {}).get("host") or "?"), []).append(
                f"Pod/{involved.get('namespace')}/{involved.get('name')}")
    for node, pods in sorted(failed.items()):
        yield Hit(Severity.HIGH, (f"Node/{node}", *sorted(set(pods))[:5]),
                  f"{len(set(pods))} pod(s) rejected with {_ADMISSION} ({_PREFERRED} failed) "
                  "while the node stays Ready: the device plugin fails every allocation")


# DP-2 -------------------------------------------------------------------------------------


def device_plugin_health_checks(view: AuditView) -> Iterable[Hit] | NotChecked:
    plugins = kube.pods_named(view, *DEVICE_PLUGIN_PODS)
    if not plugins:
        return NotChecked("no device plugin pod found")
    hits = []
    for pod in plugins:
        for container in kube.containers(pod):
            off = kube.env(container).get("DP_DISABLE_HEALTHCHECKS", "")
            if off in ("all", "xids") or "xids" in off.split(","):
                hits.append(Hit(Severity.HIGH, (kube.ref("Pod", pod),),
                                f"DP_DISABLE_HEALTHCHECKS={off}: the device plugin never marks "
                                "a GPU unhealthy on an Xid"))
    return hits


# SKEW-2 -----------------------------------------------------------------------------------


def kube_proxy_skew(view: AuditView) -> Iterable[Hit] | NotChecked:
    server = kube.version(view.api_server_version or "")
    proxies = kube.pods_named(view, *KUBE_PROXY_PODS)
    if server is None:
        return NotChecked(f"API server version unreadable: {view.api_server_version!r}")
    tagged = [(p, v) for p in proxies if (v := _plugin_version(p)) is not None]
    if not tagged:
        return NotChecked("no kube-proxy pod with a versioned image (nodeInfo.kubeProxyVersion "
                          "is deprecated and no longer set, KEP-4004)")
    return [
        Hit(Severity.HIGH, (kube.ref("Pod", pod),),
            f"kube-proxy v{dotted(found)}, API server {view.api_server_version}: "
            f"{problem}")
        for pod, found in tagged
        if (problem := skew_problem(found, server))
    ]


# IPVS-1 -----------------------------------------------------------------------------------


def kube_proxy_mode(view: AuditView) -> Iterator[Hit]:
    for config in view.of(Input.CONFIGMAPS):
        if kube.name(config) == "kube-proxy" and re.search(
                r"^mode:\s*\"?ipvs", str((config.get("data") or {}).get("config.conf", "")),
                re.MULTILINE):
            yield Hit(Severity.MEDIUM, (kube.ref("ConfigMap", config),),
                      "kube-proxy mode ipvs: deprecated in Kubernetes 1.35 (KEP-5495); a node "
                      "whose ip_vs module is missing after a reboot has no Service routing")
    for pod in kube.pods_named(view, *KUBE_PROXY_PODS):
        args = " ".join(str(a) for c in kube.containers(pod) for a in
                        [*(c.get("command") or []), *(c.get("args") or [])])
        if "--proxy-mode=ipvs" in args:
            yield Hit(Severity.MEDIUM, (kube.ref("Pod", pod),), "--proxy-mode=ipvs (deprecated "
                      "in Kubernetes 1.35, KEP-5495)")
        if kube.unfinished(pod) and not kube.is_ready(pod):
            yield Hit(Severity.HIGH, (kube.ref("Pod", pod),),
                      f"kube-proxy not Ready on {kube.node_of(pod)}: Services do not route there")


# DNS-1 ------------------------------------------------------------------------------------

COREDNS_CONFIGMAPS = ("coredns", "rke2-coredns-rke2-coredns")
_FORWARD = re.compile(r"forward\s+\.\s+/etc/resolv\.conf(?P<body>\s*\{[^}]*\})?")


def coredns_forward(view: AuditView) -> Iterable[Hit] | NotChecked:
    configs = [c for c in view.of(Input.CONFIGMAPS) if kube.name(c) in COREDNS_CONFIGMAPS]
    if not configs:
        return NotChecked(f"no CoreDNS ConfigMap ({', '.join(COREDNS_CONFIGMAPS)}) in kube-system")
    hits = []
    for config in configs:
        corefile = str((config.get("data") or {}).get("Corefile", ""))
        match = _FORWARD.search(corefile)
        if match and "policy sequential" not in (match["body"] or ""):
            hits.append(Hit(Severity.MEDIUM, (kube.ref("ConfigMap", config),),
                            "forward . /etc/resolv.conf without policy sequential: CoreDNS "
                            "picks upstreams at random, so one public resolver among internal "
                            "ones fails internal names some of the time (the nodes' resolv.conf "
                            "needs the node agent: not read here)"))
    return hits
