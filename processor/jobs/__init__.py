"""``replay --jobs N``: the one reader and writer between the journal and the shards (``coordinator``),
the engine over a set of partitions (``shard``), and the worker processes that run shards (``workers``).
The embedded runner (``processor/embedded.py``) drives them; nothing else does."""
