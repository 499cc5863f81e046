"""The benchmark's parts; the entry point is experiments/benchmark.py."""
