"""gpuledger analytics: weekly utilisation, queue-time and cost reports (issue 5; not built yet)."""
