"""The Spark pipeline: bulk and history work over events, never the live path.

Event data is kept twice per row: the lossless ICRC-16 wire JSON, and its JSON view
(:func:`tidings.core.jsonview.json_view_bytes`, read with ``parse_json``) as a Spark
``VARIANT`` column that filters query (:mod:`tidings.pipeline.filters`).
"""
