"""Spark jobs that move or inspect table data: copy, compare, repair, batch replay support.

- :mod:`.spark` creates the one SparkSession of a process from configuration.
- :mod:`.copy` ``copy_tables``: many tables under one exported snapshot, COPY streams in
  Spark tasks, retry-safe through ``ferry_copy.range_done`` in the destination.
- :mod:`.compare` ``compare_tables``: count + checksum per primary-key bucket on both sides.
- :mod:`.repair` ``repair_tables``: exact differing rows via a Spark full outer join, fix SQL
  written to a file and optionally applied in one transaction.
- :mod:`.syncpoint` how compare/repair get both sides' snapshots at one logical point.
- :mod:`.snapshot`, :mod:`.tables`, :mod:`.keyranges`, :mod:`.progress`: shared helpers.
"""
