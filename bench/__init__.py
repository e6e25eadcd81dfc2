"""``make bench``: the benchmark suite (see ``python -m bench --help``)."""
