"""gpuledger: know whether your GPUs are earning their cost. The CLI lives in ``gpuledger.cli``."""

from exporter import __version__

__all__ = ["__version__"]
