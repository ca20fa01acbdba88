"""The experiment files: the schema, reading YAML with the line of every value, sweeps and suites,
and the registry of congestion-control algorithms. Pure: no kernel, no processes."""
