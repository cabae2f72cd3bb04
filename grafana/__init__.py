"""gpuledger's Grafana dashboards as code.

``python grafana/generate.py`` writes ``grafana/dashboards/*.json`` from the modules here:
``panels`` (the layout and the panel kinds), ``promql`` (the query fragments every dashboard
shares) and one module per dashboard. No third-party dependency; see docs/dashboards.md.
"""
