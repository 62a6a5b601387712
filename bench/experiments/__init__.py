"""Experiments kept for the record: measured in docs/benchmarks.md, not streamctl code paths."""
