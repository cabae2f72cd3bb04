# gpuledger exporter image. Build: docker build -t gpuledger .
# Run on a GPU node: docker run --gpus all --pid=host -p 10044:10044 gpuledger
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpuledger ./gpuledger
COPY exporter ./exporter
COPY analytics ./analytics
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
# BENCH=true adds torch (a CUDA build from PyPI, several GB) for the scheduled benchmarks
ARG BENCH=false
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PYTHONDONTWRITEBYTECODE=1 \
    STATE_DIRECTORY=/var/lib/gpuledger
RUN useradd --system --uid 10044 --home-dir /var/lib/gpuledger --create-home gpuledger
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && if [ "$BENCH" = "true" ]; then pip install --no-cache-dir "torch>=2.3,<3" numpy; fi
USER gpuledger
# 10044 the exporter; 10045 `gpuledger analytics` or `gpuledger up` (reports under /var/lib/gpuledger)
EXPOSE 10044 10045
HEALTHCHECK --interval=30s --timeout=5s CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:10044/healthz', timeout=4)"]
ENTRYPOINT ["gpuledger"]
CMD ["exporter", "--reader", "nvml"]
