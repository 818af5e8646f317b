"""The embedded runner: the engine over a ``.jsonl`` journal, a partitioned RocksDB state and a ledger file.

``runner`` drives a replay; ``coordinator`` is its one reader and writer; ``shard`` runs the engine over a
set of partitions, in this process or in ``workers`` processes (``replay --jobs N``); ``statedir`` is the
state directory, ``ledgerfile`` the ledger, ``archive`` what ``explain`` reads back. Nothing here imports
the commands, the web surface or the stream path.
"""
