"""Spark jobs that move or inspect table data: copy, compare, repair, batch replay support."""
