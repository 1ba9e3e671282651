"""Helpers for running real PostgreSQL clusters locally (tests, demo, benchmarks)."""
