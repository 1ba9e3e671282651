"""Prometheus metrics of the worker and the ticker, served on ``metrics_port``: the
endpoint (:mod:`.endpoint`), its HTTP server and the scrape connection (:mod:`.server`,
imported by a daemon only when ``metrics_port`` is set), the worker's
collector (:mod:`.worker`), the ticker's (:mod:`.ticker`).  ``docs/metrics.md`` lists every
metric.
"""
