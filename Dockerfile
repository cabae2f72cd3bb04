# gpuledger image: the exporter, the analytics daemon and `up`. Not built in CI (no Docker engine
# there); tests/test_deploy_dockerfile.py checks its structure. Deployments: docs/deploy.md.
#
#   docker build -t gpuledger:0.1.0 .                      # from the repository root
#   docker build -t gpuledger:0.1.0-bench --build-arg BENCH=true .   # + torch for the benchmarks
#
#   docker run --gpus all --pid=host -p 10044:10044 gpuledger:0.1.0        # exporter (default command)
#   docker run -p 10045:10045 -e HEALTH_URL=http://127.0.0.1:10045/healthz \
#       gpuledger:0.1.0 analytics --prometheus-url http://prometheus:9090 --source prometheus
#
# The healthcheck probes every URL in HEALTH_URL (space-separated; all must answer 200): the
# default is the exporter's; set http://127.0.0.1:10045/healthz for `analytics`, and both for `up`.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpuledger ./gpuledger
COPY exporter ./exporter
COPY analytics ./analytics
COPY daemonkit ./daemonkit
# wheels of gpuledger and of every dependency, grpcio included (the kubelet's pod-resources API
# names the pods on Kubernetes nodes), so the final stage installs without an index
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[kubernetes]"

FROM python:3.11-slim
# BENCH=true adds torch (a CUDA build from PyPI, several GB) for the scheduled benchmarks
ARG BENCH=false
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    STATE_DIRECTORY=/var/lib/gpuledger \
    HEALTH_URL=http://127.0.0.1:10044/healthz
# uid/gid 10044; the state folder and its reports folder exist in the image with this owner, so
# a named volume mounted on either starts out writable for it
RUN groupadd --system --gid 10044 gpuledger \
    && useradd --system --uid 10044 --gid 10044 --home-dir /var/lib/gpuledger --shell /usr/sbin/nologin gpuledger \
    && install -d -o gpuledger -g gpuledger -m 0750 /var/lib/gpuledger /var/lib/gpuledger/reports
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "gpuledger[kubernetes]" && rm -rf /wheels \
    && if [ "$BENCH" = "true" ]; then pip install --no-cache-dir "torch>=2.3,<3" numpy; fi
USER 10044:10044
WORKDIR /var/lib/gpuledger
# 10044 the exporter; 10045 `gpuledger analytics` or the analytics half of `gpuledger up`
EXPOSE 10044 10045
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; [r.urlopen(u, timeout=4) for u in os.environ['HEALTH_URL'].split()]"]
ENTRYPOINT ["gpuledger"]
CMD ["exporter", "--reader", "nvml"]
