"""The Kafka stream path: a thin Faust shell around the one engine.

``app`` builds the Faust app (one agent over the journal topic, one
changelog-backed RocksDB table for engine state, web views), ``processing``
holds the per-batch ordering rule (outputs durable, then the changelog, then
local state) and the journal position kept in the state, ``journal`` reads
entries the stream skipped, ``changeset`` is the one-record-per-entry changelog
format, ``tablestore`` adapts Faust's per-partition RocksDB databases to
``processor.store.StateStore``, and ``publish`` / ``dump`` are the journal
producer and the reference output consumer. See docs/kafka.md. Faust and aiokafka are imported
only by the modules that need them, so the embedded CLI stays light.
"""
