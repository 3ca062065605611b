# PGCHECKPOINT_AES_KEYS set as the application sets it, and a graph to compile.
import base64
import os

from doc_helpers import DSN, K1, approval_builder

os.environ["PGCHECKPOINT_AES_KEYS"] = f"k1:{base64.b64encode(K1).decode()}"
builder = approval_builder()
assert DSN
