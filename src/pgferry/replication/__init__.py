"""Table replication: the registry, the worker that replays batches, copy hand-over, sync."""
