"""The cases: the binary format, generated inputs, the suites, the cache."""
