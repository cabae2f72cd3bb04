"""gpuledger analytics: weekly utilisation, queue-time and cost reports from the exporter's history or Prometheus."""
