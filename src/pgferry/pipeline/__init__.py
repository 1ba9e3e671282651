"""Spark jobs that move or compare table data between two databases: copy, compare, repair.

- :mod:`.spark` creates the one SparkSession of a process from configuration;
  :mod:`.daemon` is the Python worker daemon it tells Spark to fork the workers from.
- :mod:`.copy` ``copy_tables``: many tables under one exported snapshot, COPY streams in
  Spark tasks, retry-safe through ``ferry_copy.range_done`` in the destination.
- :mod:`.compare` ``compare_tables``: count + checksum per primary-key bucket on both sides.
- :mod:`.repair` ``repair_tables``: exact differing rows via a Spark full outer join, fix SQL
  written to a file and optionally applied in one transaction.
- :mod:`.buckets`: the primary-key buckets and per-table plan compare and repair share.
- :mod:`.snapshot`, :mod:`.tables`, :mod:`.keyranges`, :mod:`.progress`: what the jobs share.

Each job is planned on the driver and runs its reads and writes in Spark tasks; every module
with code that runs on the executors says so in its opening paragraph.
"""
