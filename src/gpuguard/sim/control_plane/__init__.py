"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler), kubectl, Helm and Prometheus 3.x, built from their release modules on the Go
module proxy and started on loopback for the integration tier and `sim serve --control-plane
real`. Go is only the build of these tools; nothing of gpuguard's product is Go.
"""
