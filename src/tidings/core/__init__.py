"""The pure core: ICRC-16 values, ids, wire types and the rules of the standards.

Nothing here does I/O or imports a framework, so the asyncio broker and the Spark
pipeline share the same rules.
"""
