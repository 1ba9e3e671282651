"""compare, repair and diff: a subscriber's tables held against its provider's, and fixed.

- :mod:`.point` the one-tick sync point the commands read both sides at, and
  :mod:`.serve` the worker's side of it (the request it serves, the snapshot it posts).
- :mod:`.compare` ``compare_tables``: count + checksum per primary-key bucket on both sides
  (:mod:`.buckets` the buckets and per-table plan compare and repair share), on the
  driver's threads or in Spark tasks.
- :mod:`.repair` ``repair_tables``: the exact differing rows, joined in Spark or on the
  driver (:mod:`.repair_local`), fix SQL written to a file and optionally applied;
  :mod:`.keydiff` ``pgferry diff``'s report of the differing keys.
- :mod:`.lake_compare`, :mod:`.lake_repair`: the same for a lake leaf's lake tables
  (:mod:`.lake_spark` both sides of a large one as Spark DataFrames).
- :mod:`.spark_tasks` their Spark jobs in the DataFrame API, which a Spark Connect session
  carries as well as a classic one.

Every module with code that runs on the executors says so in its opening paragraph.
"""
