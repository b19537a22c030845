# gpuguard's image: the controller (`gpuguard run`), the node agent (`gpuguard agent`) and the
# Jobs it pins to isolated nodes (`gpuguard evidence`, `gpuguard burnin`). The burn-in needs
# PyTorch with CUDA: build with --build-arg WITH_TORCH=1 (a multi-GB image).
FROM python:3.11-slim
ARG WITH_TORCH=0
# journalctl: the evidence Job and the agent read the host's journal files with the image's
# own journalctl (`journalctl --root /host`), never the host's binaries (docs/security.md).
RUN apt-get update && apt-get install -y --no-install-recommends systemd && \
    rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir . && \
    if [ "$WITH_TORCH" = "1" ]; then pip install --no-cache-dir torch; fi && \
    rm -rf /src
WORKDIR /
ENTRYPOINT ["gpuguard"]
CMD ["--help"]
