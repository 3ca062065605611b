"""Helpers the test folders share, each written once, one module per kind of help.

Test modules import them by module, `from support.savers import SaverApi`:
pytest puts `tests/` on `sys.path` when it loads `tests/conftest.py` (its
default `prepend` import mode, `tests/` having no `__init__.py`), so this
works for every folder, run whole or one file at a time, with or without xdist.
"""
