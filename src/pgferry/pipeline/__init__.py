"""Spark jobs that move table data between two databases, and what their jobs share.

- :mod:`.spark` creates the one SparkSession of a process from configuration;
  :mod:`.daemon` is the Python worker daemon it tells Spark to fork the workers from.
- :mod:`.copy` ``copy_tables``: many tables under one exported snapshot, COPY streams in
  Spark tasks, retry-safe through ``ferry_copy.range_done`` in the destination.
- :mod:`.lake_copy` the initial load of lake tables (:mod:`.lake_load` its task).
- :mod:`.snapshot`, :mod:`.tables`, :mod:`.keyranges`, :mod:`.progress`: what the jobs
  share, with compare and repair (:mod:`pgferry.sync`), which run on the same session and
  daemon.

Each job is planned on the driver and runs its reads and writes in Spark tasks; every module
with code that runs on the executors says so in its opening paragraph.
"""
