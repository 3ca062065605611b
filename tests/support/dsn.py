"""Connection strings as users write them: URLs built from the test server's conninfo."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from psycopg.conninfo import conninfo_to_dict


def url_of(dsn: str, scheme: str = "postgresql") -> str:
    """`dsn` as a URL with `scheme` (`postgresql+psycopg` as in a DATABASE_URL).

    A host that is a Unix-socket directory (the embedded server's) goes in the
    query, `postgresql://user@/db?host=/path`, where libpq reads it; every
    other parameter goes where a URL puts it, or in the query.
    """
    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    user = params.pop("user", "")
    password = params.pop("password", "")
    dbname = params.pop("dbname", "")
    host = params.get("host", "")
    netloc = ""
    if user:
        netloc = quote(user, safe="") + (":" + quote(password, safe="") if password else "") + "@"
    if host and not host.startswith("/"):
        netloc += host if ":" not in host else f"[{host}]"
        params.pop("host")
        if "port" in params:
            netloc += ":" + params.pop("port")
    query = f"?{urlencode(params)}" if params else ""
    return f"{scheme}://{netloc}/{quote(dbname, safe='')}{query}"
