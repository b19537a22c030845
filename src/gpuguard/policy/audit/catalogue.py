"""The audit's rules, one entry each (docs/audit.md lists them with what each reads).

Adding a rule is one ``Rule(...)`` here: its ID, title, the inputs it needs (a missing input
makes it "not checked"), its check, the public source behind it, and the fix.
"""

from __future__ import annotations

from gpuguard.model.audit import Input as In
from gpuguard.policy.audit import fleet, gpu_stack, nodes, workloads
from gpuguard.policy.audit.registry import Rule

K8S = "https://kubernetes.io/docs"
DCGM_FIELDS = "https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html"

RULES: tuple[Rule, ...] = (
    # --- incidents first: a cordon that silenced alerts, a device plugin that fails every
    # allocation, Xid alerts on a gauge, node repair replacing GPU nodes, no spare capacity
    Rule("CORDON-1", "Cordoned without a reason, or for more than 72 h",
         (In.NODES,), nodes.cordon,
         f"{K8S}/reference/using-api/server-side-apply/#field-management",
         "uncordon the node, or annotate why it is out (and who owns it); an alert that "
         "skips cordoned nodes should not silence GPU faults"),
    Rule("DP-1", "Device plugin where one lost GPU fails every allocation",
         (In.PODS,), gpu_stack.device_plugin_version,
         "https://github.com/NVIDIA/k8s-device-plugin/issues/2038",
         "move the device plugin outside v0.17.0-v0.20.0 (or cordon nodes with a GPU off the "
         "bus); see also https://github.com/pytorch/ci-infra/issues/1057"),
    Rule("DCGM-2", "Xid alerts that rate() the last-Xid gauge",
         (In.PROM_RULES, In.PROM_SERIES), gpu_stack.xid_alerts,
         "https://github.com/NVIDIA/dcgm-exporter/blob/main/etc/default-counters.csv",
         "enable DCGM_EXP_XID_ERRORS_COUNT in the counters CSV and alert on it (or on "
         "gpuguard_xid_total); never increase() DCGM_FI_DEV_XID_ERRORS"),
    Rule("REPAIR-1", "Karpenter node repair replacing GPU nodes",
         (In.NODES, In.DEPLOYMENTS, In.NODECLAIMS), nodes.node_repair,
         "https://docs.aws.amazon.com/eks/latest/userguide/node-health.html",
         "make the GPU health agent see the GPUs (e.g. libdcgm on the node image) or turn "
         "NodeRepair off for GPU node pools"),
    Rule("SPARE-1", "Less than 10 % of a GPU pool free", (In.NODES, In.PODS),
         nodes.spare_capacity, "https://imbue.com/research/70b-infrastructure/",
         "keep 10-20 % more GPU nodes than training needs, so a job can restart at once"),
    # --- node and version hygiene
    Rule("SKEW-1", "Kubelet outside the version-skew policy", (In.NODES, In.API_VERSION),
         nodes.kubelet_skew, "https://kubernetes.io/releases/version-skew-policy/",
         "upgrade the API server first; keep kubelets at most 3 minors behind it"),
    Rule("SKEW-2", "kube-proxy outside the version-skew policy", (In.PODS, In.API_VERSION),
         gpu_stack.kube_proxy_skew, "https://kubernetes.io/releases/version-skew-policy/",
         "run kube-proxy at the kubelet's version, never newer than the API server"),
    Rule("IPVS-1", "kube-proxy in IPVS mode, or not Ready", (In.PODS, In.CONFIGMAPS),
         gpu_stack.kube_proxy_mode, "https://github.com/kubernetes/enhancements/issues/5495",
         "move kube-proxy to nftables or iptables mode; restart a kube-proxy that is not Ready"),
    Rule("COND-1", "GPU node schedulable with a GPU fault condition or missing GPUs",
         (In.NODES,), nodes.fault_condition_schedulable,
         "https://learn.microsoft.com/en-us/azure/aks/gpu-health-monitoring",
         "cordon the node (gpuguard isolates it when its guard runs) and diagnose the GPU"),
    Rule("COND-2", "Node condition with a malformed time", (In.NODES,),
         nodes.malformed_condition_times,
         f"{K8S}/reference/kubernetes-api/cluster-resources/node-v1/#NodeStatus",
         "fix the writer of the condition (the node's managedFields name its field manager) "
         "to write RFC 3339 times; until then the condition's time is unknown to gpuguard"),
    Rule("UPG-1", "Driver or kernel drift in a GPU pool; GPU stack pods restarting",
         (In.NODES, In.PODS), nodes.version_drift,
         "https://github.com/kubernetes-sigs/kubespray/issues/8540",
         "pin the driver and kernel packages (hold them from unattended-upgrades) and roll "
         "upgrades through the pool deliberately"),
    Rule("DNS-1", "CoreDNS forwards at random to the node's resolvers", (In.CONFIGMAPS,),
         gpu_stack.coredns_forward, "https://coredns.io/plugins/forward/",
         "add `policy sequential` to the forward block, or forward to internal resolvers only"),
    # --- GPU health stack
    Rule("DCGM-1", "GPU node without a working dcgm-exporter", (In.NODES, In.PODS),
         gpu_stack.dcgm_coverage, "https://github.com/NVIDIA/dcgm-exporter",
         "fix the dcgm-exporter DaemonSet's scheduling (tolerations, node selector) or pod"),
    Rule("DCGM-3", "DCGM fields gpuguard reads that are not collected", (In.PROM_SERIES,),
         gpu_stack.fields_not_collected,
         "https://github.com/NVIDIA/dcgm-exporter/blob/main/etc/default-counters.csv",
         "give dcgm-exporter the chart's counters file (ConfigMap gpuguard-dcgm-counters)"),
    Rule("DP-2", "Device plugin health checks switched off", (In.PODS,),
         gpu_stack.device_plugin_health_checks, "https://github.com/NVIDIA/k8s-device-plugin",
         "unset DP_DISABLE_HEALTHCHECKS (or list only the Xids to ignore)"),
    Rule("PDB-1", "PodDisruptionBudget over GPU pods allows no disruption",
         (In.PDBS, In.PODS), workloads.blocking_pdbs,
         "https://github.com/kubernetes/kubernetes/issues/48307",
         "allow at least one disruption (maxUnavailable: 1) or drain by hand during upgrades"),
    Rule("GPUOP-1", "GPU Operator driver upgrade cannot progress",
         (In.NODES, In.CLUSTER_POLICIES), nodes.gpu_operator_upgrades,
         "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/"
         "gpu-driver-upgrades.html",
         "return or remove long-cordoned GPU nodes, or raise driver.upgradePolicy.maxUnavailable"),
    Rule("GG-1", "A GPU fault gpuguard withheld (breaker) is still pending", (In.NODES,),
         nodes.withheld_faults, "docs/breaker.md",
         "see `gpuguard status`; reset the breaker once the cause is understood"),
    # --- workloads
    Rule("TOL-1", "GPU pod tolerates the cordon", (In.PODS,), workloads.tolerates_cordon,
         f"{K8S}/reference/labels-annotations-taints/#node-kubernetes-io-unschedulable",
         "tolerate only the taints the pod needs; never `operator: Exists` without a key"),
    Rule("PIN-1", "Workload template pins spec.nodeName", (In.NODES, In.JOBS, In.DEPLOYMENTS),
         workloads.pinned_templates, "https://github.com/kubernetes/kubernetes/issues/117843",
         "use a nodeSelector or node affinity so the scheduler (and the cordon) applies"),
    Rule("TGP-1", "GPU pod killed before CUDA cleanup (short grace period)", (In.PODS,),
         workloads.short_grace,
         f"{K8S}/concepts/workloads/pods/pod-lifecycle/#pod-termination",
         "raise terminationGracePeriodSeconds so the process can release its GPU"),
    Rule("NCCL-1", "Distributed training without NCCL error handling", (In.PODS,),
         workloads.nccl_unbounded,
         "https://pytorch.org/docs/stable/torch_nccl_environment_variables.html",
         "set TORCH_NCCL_ASYNC_ERROR_HANDLING=3 (the default) and a collective timeout"),
    Rule("RAY-1", "RayJob keeps its cluster (and GPUs) after the job", (In.RAYJOBS,),
         workloads.rayjob_keeps_cluster, "https://github.com/ray-project/kuberay/issues/1023",
         "set spec.shutdownAfterJobFinishes: true"),
    Rule("PRIO-1", "GPU pods without a priority class", (In.PODS,), workloads.no_priority,
         f"{K8S}/concepts/scheduling-eviction/pod-priority-preemption/",
         "give training and inference their own PriorityClasses"),
    Rule("GANG-0", "Multi-pod GPU job on the default scheduler without a gang",
         (In.PODS,), fleet.no_gang,
         "https://kueue.sigs.k8s.io/docs/tasks/manage/setup_wait_for_pods_ready/",
         "schedule the job as a gang (Volcano, coscheduling, Kueue with waitForPodsReady)"),
    # --- scheduling and interconnect health (policy.gang, policy.topology, policy.interconnect)
    Rule("GANG-1", "Job holding GPUs while part of it cannot be placed", (In.PODS,),
         fleet.gang_deadlock, "https://github.com/kubeflow/trainer/issues/1617",
         "schedule as a gang (Volcano, coscheduling, Kueue waitForPodsReady), or delete the job "
         "to free its GPUs"),
    Rule("TOPO-1", "Multi-GPU pod on GPUs not joined by NVLink or across NUMA",
         (In.PROM_FLEET_HEALTH,), fleet.topology_mismatch,
         f"{K8S}/tasks/administer-cluster/topology-manager/",
         "ask for GPUs of one NVLink domain (device plugin preferred allocation, Topology "
         "Manager single-numa-node)"),
    Rule("THROTTLE-1", "GPU clocks cut by thermal or power slowdown", (In.PROM_FLEET_HEALTH,),
         fleet.throttled, DCGM_FIELDS,
         "check cooling and power delivery of the node; a throttled GPU slows its whole job"),
    Rule("NVLINK-1", "NVLink CRC, replay or recovery errors", (In.PROM_FLEET_HEALTH,),
         fleet.nvlink_errors, DCGM_FIELDS,
         "drain the node's jobs and have the NVLink/NVSwitch path inspected"),
    Rule("PCIE-1", "PCIe replays growing", (In.PROM_FLEET_HEALTH,), fleet.pcie_replays,
         DCGM_FIELDS, "reseat or replace the riser/card; check the slot's link width and speed"),
    Rule("IB-1", "InfiniBand port flapping", (In.PROM_FLEET_HEALTH,), fleet.ib_flapping,
         "https://imbue.com/research/70b-infrastructure/",
         "check the port's cable and transceiver; a flapping link stalls every collective"),
)
