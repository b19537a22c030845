"""The transport layer: the only gpuguard code meant to speak HTTP to Kubernetes and
Prometheus, and to turn what the wire and the client libraries raise into gpuguard's typed,
chained errors naming the URL, query or object that failed.

Why a layer of its own: readers (``sources``), writers (``actuators``), the Lease elector
and the node agent all talk to the same two APIs; keeping the wire here means one rule per
protocol detail (a timeout's wording, a 409's meaning) instead of a copy per adapter.
It imports only ``model`` and ``errors``, never a decision, the loop or the CLI.
"""
