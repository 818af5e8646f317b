"""What the runners and commands ask of the host: journal and output files, folder locks, signals,
the garbage collector, and text safe for a terminal."""
