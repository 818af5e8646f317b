"""The Kafka stream path around the one engine: the batch order, the Faust worker, the clients (7.9k lines),
in rooms that import only downwards.

``batch/`` runs a batch in the only safe order (outputs durable, then one
change set per partition, then local state) against the Faust-free interfaces
in ``batch/types``; ``clients/`` holds the aiokafka plumbing, the short-lived
commands (``publish``, ``ledger-dump``, ``status``, ``topics apply``, the
Review consumer) and ``faustcompat``, the one module that touches library
internals; ``worker/`` is the Faust worker (``build.build_worker`` assembles it;
``tablestore`` adapts Faust's per-partition RocksDB databases to
``recurrence_ledger.processor.store.base.StateStore``); ``cli`` sits on top. See
docs/kafka.md. The package is imported by ``recurrence_ledger.processor.cli`` when it
builds its parser, and the clients never load Faust (``tests/product/test_layers.py``).
"""

from .faustentry import NOT_A_FAUST_APP

#: ``faust -A recurrence_ledger.processor.stream`` (and the pre-rooms ``...stream.app``) finds no app,
#: only the command to use.
app = NOT_A_FAUST_APP
