"""Integrations apart from the library: `make demo` and the embedded server of tests and demos.

The library never imports it; the command line does, for `--dsn embedded`.

Example:
    >>> from pgcheckpoint.contrib.embedded import embedded_dsn
    >>> embedded_dsn()  # doctest: +SKIP
    'host=/.../.pgcheckpoint/pgdata/... dbname=postgres user=postgres'
"""
