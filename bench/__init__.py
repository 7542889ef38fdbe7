"""Benchmarks. ``python -m bench`` runs every scenario with the peers side by side and
writes ``bench/results/latest.json``; ``python -m bench.<name>`` runs one module alone.
They print figures, never assert them."""
