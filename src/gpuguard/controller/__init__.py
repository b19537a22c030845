"""The loop: tick = collect, decide, act; leader election; backoff; gpuguard's own metrics."""
