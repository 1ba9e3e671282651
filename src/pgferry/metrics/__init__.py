"""Prometheus metrics of the worker and the ticker, served on ``metrics_port``: the
endpoint, its HTTP server and the scrape connection (:mod:`.server`), the worker's
collector (:mod:`.worker`), the ticker's (:mod:`.ticker`).  ``docs/metrics.md`` lists every
metric.
"""
