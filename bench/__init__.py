"""Benchmarks: run each module with ``python -m bench.<name>``; they print figures, never assert them."""
