"""SQL as data: the named statements of `sql/queries/`, and typed array parameters. Internal.

Example:
    >>> from pgcheckpoint.statements.queries import Queries
    >>> "pgc_checkpoints" in Queries("public")["thread_heads"]
    True
"""
