"""Per-job and per-group statements (``gpuledger job``, ``gpuledger statement``): the report's own
job rows for a window, selected, summed and explained in plain words; never a second cost model."""
