"""What the tests and the benchmarks share, and the product never imports.

- ``localrun``: the local broker (``deploy/kafka/kafka.sh``, or ``KAFKA_BOOTSTRAP_SERVERS``),
  the installed ``recurrence`` command (a run of it, a replay's command line, ``serve`` started),
  free ports, polling with a deadline, the headless browser's switches;
- ``deployment``: topics under one prefix and ``recurrence worker`` subprocesses, with what a
  test or a benchmark asks of them (readiness, positions, lag of every input, outputs);
- ``oracle``: the embedded runner over the same journal, the reference both compare with;
- ``topologies``: the secured and three-node brokers (``tests/cluster``);
- ``fixtures``: the state fixtures of earlier releases (``tests/embedded/test_upgrade_fixtures.py``);
- ``releases``: earlier releases installed apart, by their own import names.

Comparing the two runners is the product's own rule (``recurrence_ledger.processor.verify``,
``recurrence verify``); this package only drives the processes. Installed by ``make venv``
from ``dev/pyproject.toml`` (editable), never part of the product's wheel; tests also find it
through ``pythonpath`` in the root ``pyproject.toml``.
"""
