# gpuledger image: the exporter, the analytics daemon and `up`. Built and run in CI with podman by
# scripts/test-image (a Debian bookworm base made with mmdebstrap, wheels made on the host);
# tests/deploy/test_deploy_dockerfile.py checks its structure. Deployments: docs/deploy.md.
#
#   docker build -t gpuledger:0.1.0 .                      # from the repository root
#   docker build -t gpuledger:0.1.0-bench --build-arg BENCH=true .   # + torch for the benchmarks
#   docker build --build-arg BASE=localhost/debian-python:bookworm .  # any Python 3.11+ with venv
#
#   docker run --gpus all --pid=host -p 10044:10044 gpuledger:0.1.0        # exporter (default command)
#   docker run -p 10045:10045 -e HEALTH_URL=http://127.0.0.1:10045/healthz \
#       gpuledger:0.1.0 analytics --prometheus-url http://prometheus:9090 --source prometheus
#
# The healthcheck probes every URL in HEALTH_URL (space-separated; all must answer 200): the
# default is the exporter's; set http://127.0.0.1:10045/healthz for `analytics`, and both for `up`.
# /healthz is readiness (= /readyz): an exporter whose NVML is down is "unhealthy", which is true,
# and Docker restarts nothing for it. Where something does restart unhealthy containers (Swarm,
# an autoheal sidecar), set HEALTH_URL to /livez (200 while the process serves) instead.
# podman keeps the HEALTHCHECK only in Docker-format images: `podman build --format docker`.

# any image with python3 (3.11 or later) and its venv module: the official one, or Debian's
# python3 + python3-venv (Debian's Python refuses system-wide pip installs, so both stages use a venv)
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
# pip's own settings, unset by default (pip then uses its index). Without an index reachable in
# the build, make the wheels beforehand and point pip at them, e.g. (scripts/test-image):
#   --volume "$PWD/wheels:/host-wheels:ro" --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/host-wheels
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpuledger ./gpuledger
COPY exporter ./exporter
COPY analytics ./analytics
COPY daemonkit ./daemonkit
COPY domain ./domain
COPY grafana ./grafana
# wheels of gpuledger and of every dependency, grpcio included (the kubelet's pod-resources API
# names the pods on Kubernetes nodes), so the final stage installs without an index; tzdata
# (Python's zoneinfo database) because a base without Debian's tzdata package knows no time
# zone, not even UTC, and the analytics daemon refuses to start there
RUN python3 -m venv /opt/build \
    && /opt/build/bin/pip wheel --no-cache-dir --wheel-dir /wheels ".[kubernetes]" tzdata

FROM ${BASE}
# BENCH=true adds torch for the scheduled benchmarks: from the index a CUDA build (several GB),
# or whatever torch wheel PIP_FIND_LINKS offers (scripts/test-image: the machine's CPU build)
ARG BENCH=false
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/gpuledger/bin:$PATH \
    STATE_DIRECTORY=/var/lib/gpuledger \
    HEALTH_URL=http://127.0.0.1:10044/healthz
# uid/gid 10044; the state folder and its reports folder exist in the image with this owner, so
# a named volume mounted on either starts out writable for it
RUN groupadd --system --gid 10044 gpuledger \
    && useradd --system --uid 10044 --gid 10044 --home-dir /var/lib/gpuledger --shell /usr/sbin/nologin gpuledger \
    && install -d -o gpuledger -g gpuledger -m 0750 /var/lib/gpuledger /var/lib/gpuledger/reports
# the wheels are bind-mounted from the build stage, not copied: they leave no layer behind
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python3 -m venv /opt/gpuledger \
    && pip install --no-cache-dir --no-index --find-links=/wheels "gpuledger[kubernetes]" tzdata \
    && if [ "$BENCH" = "true" ]; then pip install --no-cache-dir "torch>=2.3,<3" numpy; fi
USER 10044:10044
WORKDIR /var/lib/gpuledger
# 10044 the exporter; 10045 `gpuledger analytics` or the analytics half of `gpuledger up`
EXPOSE 10044 10045
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; [r.urlopen(u, timeout=4) for u in os.environ['HEALTH_URL'].split()]"]
ENTRYPOINT ["gpuledger"]
CMD ["exporter", "--reader", "nvml"]
