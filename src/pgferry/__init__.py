"""pgferry: trigger-based logical replication for PostgreSQL with a Spark data pipeline.

Layers, from the bottom up (imports only point downwards):

- ``sql/``          versioned SQL schema files installed into each database
- ``queue/``        the transactional event queue (ticks, batches, consumers, ticker daemon)
- ``pipeline/``     Spark jobs that move or inspect table data (copy, compare, repair)
- ``node/``         cascade nodes: root / branch / leaf, locations, subscriber registration
- ``replication/``  table registry, the worker that replays batches, copy hand-over
- ``cli/``          the ``pgferry`` command line on top
"""

__version__ = "0.1.0"
