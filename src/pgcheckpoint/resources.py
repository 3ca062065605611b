"""Where the migrations and SQL files are, installed or in a checkout.

The top-level `migrations/` and `sql/` folders are the one source. A wheel
carries copies as `pgcheckpoint/_migrations` and `pgcheckpoint/_sql`. When the
package runs from `src/` of a checkout (an editable install), the live folders
next to `src/` win, so a stale copy left in site-packages is never read.

Example:
    >>> from pgcheckpoint.resources import sql_dir
    >>> (sql_dir() / "queries" / "_fragments.sql").is_file()
    True
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def _find(live_name: str, packaged_name: str, marker: str) -> Path:
    checkout = _PACKAGE_DIR.parent.parent / live_name
    if _PACKAGE_DIR.parent.name == "src" and (checkout / marker).is_file():
        return checkout
    packaged = _PACKAGE_DIR / packaged_name
    if (packaged / marker).is_file():
        return packaged
    raise FileNotFoundError(
        f"pgcheckpoint cannot find its {live_name!r} folder (looked in {str(checkout)!r} "
        f"and {str(packaged)!r}); reinstall the package"
    )


@cache
def migrations_dir() -> Path:
    """The Alembic script folder (holds `env.py` and `versions/`).

    Example:
        >>> (migrations_dir() / "env.py").is_file()
        True
    """
    return _find("migrations", "_migrations", "env.py")


@cache
def sql_dir() -> Path:
    """The folder of the named SQL statements.

    Example:
        >>> sql_dir().name in ("sql", "_sql")
        True
    """
    return _find("sql", "_sql", "queries/_fragments.sql")
