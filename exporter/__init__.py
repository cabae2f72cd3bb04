"""gpuledger exporter: samples GPUs, integrates exact counters, serves them to Prometheus."""

from importlib import metadata

try:
    __version__ = metadata.version("gpuledger")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"
