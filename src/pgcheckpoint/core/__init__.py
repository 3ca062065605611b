"""The checkpointer written once, without I/O.

Each operation is a generator (`pgcheckpoint.ops.Op`): it yields the named
statements to run, receives their rows, and returns the operation's result.
`PostgresSaver` and `AsyncPostgresSaver` only run them (`saver.run(op)`), so
the logic exists once for both. The operations are functions of one module
per concern, each taking the saver's `state.SaverState` first: `writes` (put,
put_writes), `reads` (get_tuple, list), `delta_history` (DeltaChannel),
`deletes` (delete_thread, prune, delete_for_runs), `copies` (copy_thread),
`reseal` (rows sealed again for a copy or a key rotation). Beside them:
`caches` and `appends` (what a saver keeps between calls), `sharing` (the
rule of what a value handed out may share, and the copies it takes),
`locks` (every advisory lock), `official` (the official saver's tables),
`sends` (the rule for the sends of checkpoints older than format v4),
`rows` (row keys). Internal: no stability promise.

Example:
    >>> from pgcheckpoint.core.deletes import delete_thread_op
    >>> from pgcheckpoint.core.state import SaverState
    >>> next(delete_thread_op(SaverState(), "t1")).name
    'read_committed'
"""
