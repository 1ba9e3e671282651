"""Lake tables (Delta Lake, Apache Iceberg) that a lake leaf keeps current.

Below ``handlers/`` (the ``lake`` handler applies batches with it) and used by
``pipeline/lake_copy.py`` (the initial load) and ``sync/lake_compare.py``: the types
(:mod:`.types`), which table and format (:mod:`.spec`), and one module per format that does
every read and write of a table (:mod:`.delta`, :mod:`.iceberg`).  Needs only the base
modules and the format's own package (the optional extra ``pgferry[lake]``).
"""
