"""Work over many threads, written as sweeps that either saver runs with `run_each`.

- `retention`: delete idle threads, or trim history (`prune_older_than`,
  `prune_keep_last`, `pgcheckpoint prune`);
- `rotation`: re-encrypt every value under the active key (`rotate_key`);
- `importer`: copy threads from the official saver's tables (`import-langgraph`);
- `stats`: what the tables hold (`pgcheckpoint stats`), one op.

Example:
    >>> from pgcheckpoint.maintenance.rotation import rotation_sweep
    >>> report = saver.run_each(rotation_sweep(saver, dry_run=True))  # doctest: +SKIP
"""
