"""pgferry's benchmarks: one module per measurement, run from the repository's root as
``python -m bench.<name>``.

Each script's opening paragraph says what it measures and how; BENCHMARKS.md holds the
figures and the commands that produced them.  Shared ground: :mod:`bench.common` (results
folder, machine description, error lines), :mod:`bench.repl_env` (cluster pairs, seed data
and load), :mod:`bench.repl_systems` and :mod:`bench.repl_phases` (the replication systems
compared and the phases measured on them).
"""
