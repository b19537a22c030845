"""Read adapters: the Prometheus HTTP API and the Kubernetes API, turned into a FleetSnapshot."""
