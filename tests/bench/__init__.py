"""Benchmarks (run as modules, e.g. ``python -m tests.bench.bench_run_service``); not collected by pytest."""
