"""The world simulator: a fleet of GPU nodes, a simulated clock, fault injection from
scenario files, and the endpoints real clusters have (a Kubernetes API subset, dcgm-exporter,
kube-state-metrics, host trees). It is the world gpuguard runs against in demos and tests —
never a place for the product's own decisions.
"""
