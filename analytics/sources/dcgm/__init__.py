"""NVIDIA dcgm-exporter's series as a source (``DcgmSource``); see ``source`` and ``labels``."""

from analytics.sources.dcgm.source import DcgmSource

__all__ = ["DcgmSource"]
