"""State stores: the backend-free interface and transaction in ``base``; backends beside it.

Import a backend module (``memory``, ``rocksdb``) only where it is chosen; the
engine imports ``base`` alone, so the pure core never loads a database driver.
"""
