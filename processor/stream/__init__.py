"""The Kafka stream path: a thin Faust shell around the one engine.

``app`` builds the Faust app (one agent over the journal topic, one
changelog-backed RocksDB table for engine state, web views); ``processing``
runs a batch in the only safe order (outputs durable, then one change set per
partition, then local state) against the Faust-free interfaces in ``types``;
``journal`` reads entries the stream skipped; ``changeset`` is the changelog
record format; ``tablestore`` adapts Faust's per-partition RocksDB databases to
``recurrence.processor.store.base.StateStore``; ``publish``, ``dump``,
``status`` and ``review_consumer`` are the client commands. See docs/kafka.md.
The package is imported by ``recurrence.processor.cli`` when it builds its
parser, and ``publish``/``dump`` never load Faust (``tests/test_layers.py``).
"""
