"""Topics as code: every topic the stream path uses, its name, layout and policy, as data.

``names`` says what a deployment's topics and tables are called; ``definitions``
says what must exist (partitions, replication, cleanup policy, record limits).
The stream code reads them and they import nothing of it: the command that
applies them to a cluster (``recurrence topics apply``: creates what is
missing, reports drift, never recreates or silently alters a topic) is a
client, ``processor/stream/clients/topicsapply.py``.
"""
