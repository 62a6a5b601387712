"""Experiments kept for the record: measured in BENCHMARKS.md, not streamctl code paths."""
