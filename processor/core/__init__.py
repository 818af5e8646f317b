"""The pure core: the deterministic engine and everything it needs, over the store interface only.

No file, no clock, no store backend, no Kafka: both runners (``embedded/``, ``stream/``) drive
exactly these modules, and ``tests/product/test_layers.py`` keeps every module here free of them.
"""
