"""Replay: one provider batch applied to this node, exactly once, stage after stage.

The worker's loop (:mod:`pgferry.apply.worker`) hands each batch to
:class:`~pgferry.apply.replay.batch.Replayer`; everything under it is here, each module
one stage or what a stage is made of, in the order a batch meets them (the map:
docs/architecture.md).  Nothing here imports the loop: this package uses only the
worker's settings, its cache of routes, branch forwarding and the copy hand-over from
:mod:`pgferry.apply`.
"""
