"""Queued scripts (``execute``): the SQL file's attributes, its translation per node, its
place in replay, and ``skip-event`` for a script that fails."""
