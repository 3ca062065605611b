"""Context: the threads of the inspection guide (examples/support_threads.py)."""

import runpy
from pathlib import Path

example = Path(__file__).resolve().parents[3] / "examples" / "support_threads.py"
runpy.run_path(str(example), run_name="__main__")
