"""pgferry: trigger-based logical replication for PostgreSQL with a Spark data pipeline.

Rooms, from the bottom up (imports only point downwards; docs/architecture.md is the map):

- base modules  ``config``, ``settings``, ``db``, ``errors``, ``log``, ``daemon``, ``schema``,
                ``expressions``, ``copyio``, ``polling``
- ``sql/``       versioned SQL schema files installed into each database
- ``queue/``     the queue's Python API (``api.py``, ``batches.py``), a consumer, the ticker daemon
- ``registry/``  what a node replicates: table and sequence entries, names, catalog reads
- ``node/``      cascade nodes: set-up, capture, table commands, takeover, watermarks, status
- ``pipeline/``  Spark jobs that move table data (copy, the lake's initial load), Spark itself
- ``sync/``      compare, repair and diff: which tables, the one-tick sync point, the jobs
- ``scripts/``   queued scripts (execute), their translation per node, skip-event
- ``apply/``     the worker: batches planned, read, staged and applied; copies beside it
- ``cli/``       the ``pgferry`` command line on top (with ``metrics``)
"""

__version__ = "0.1.0"
