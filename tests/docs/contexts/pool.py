# A pool of the application's own.
from doc_helpers import DSN
from psycopg_pool import ConnectionPool

from pgcheckpoint import PostgresSaver

pool = ConnectionPool(DSN, min_size=1, max_size=2)
assert PostgresSaver
