# BOUNCER_DSN: the test database through pgbouncer in transaction mode.
import os

from psycopg_pool import AsyncConnectionPool

from pgcheckpoint import AsyncPostgresSaver, PostgresSaver

BOUNCER_DSN = os.environ["BOUNCER_DSN"]
assert AsyncConnectionPool and AsyncPostgresSaver and PostgresSaver
