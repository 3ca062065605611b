"""`pgcheckpoint rotate-key`: re-encrypt every stored value under the active key.

The checkpoints, their metadata, channel values and pending writes, and the
store's items. Runs `pgcheckpoint.maintenance.rotation`. Keys come from the
environment, as the application reads them (`EncryptedSerde.from_env()`):
`PGCHECKPOINT_AES_KEYS=k2:<new>,k1:<old>` makes `k2` the active key and lets
`k1` still decrypt. Run it while the application keeps running; once it
reports no value left under another key, remove the old key. Interrupted, it
resumes where it stopped when run again. Rows sealed by pgcheckpoint 0.1.0
and values in LangGraph's own format are rewritten in row format 2; the
command says when none is left, so the settings that read them can go.
Values are decoded in LangGraph's strict msgpack mode (`pgcheckpoint.codec.strict`):
a planted row never runs code as the operator.

Example:
    $ export PGCHECKPOINT_AES_KEYS="k2:$NEW_KEY,k1:$OLD_KEY"
    $ pgcheckpoint rotate-key --dry-run
    $ pgcheckpoint rotate-key --batch-size 1000
    $ pgcheckpoint rotate-key --allow-plaintext --store-filterable kind,user_id
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..maintenance.rotation import DEFAULT_BATCH_SIZE
from . import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_command,
    positive_int,
    print_table,
    resolve_dsn,
    resolve_schema,
)


def register(subparsers: Any) -> None:
    """Add the `rotate-key` command."""
    p = add_command(
        subparsers,
        "rotate-key",
        help="re-encrypt every stored value under the active key",
        description=(
            "Re-encrypt every stored value that is not under the active key (the first of "
            "PGCHECKPOINT_AES_KEYS), in batches, while the application keeps running. "
            "Run it again after an interruption to resume."
        ),
    )
    p.add_argument("--dry-run", action="store_true", help="only count the stored values per key id")
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"rows re-encrypted per round trip (default: {DEFAULT_BATCH_SIZE})",
    )
    p.add_argument(
        "--allow-plaintext",
        action="store_true",
        help="also encrypt values stored without encryption (migrating a database)",
    )
    p.add_argument(
        "--filterable-metadata",
        metavar="KEYS",
        default="source,step",
        help=(
            "comma-separated metadata keys the application keeps readable; applied to "
            "rows written without encryption (default: source,step)"
        ),
    )
    p.add_argument(
        "--store-filterable",
        metavar="FIELDS",
        default="",
        help=(
            "comma-separated top-level fields of store items the application keeps readable "
            "for filters (the store's filterable=); applied to items stored without "
            "encryption (default: none)"
        ),
    )
    p.set_defaults(handler=rotate_key_command)


def rotate_key_command(args: argparse.Namespace) -> int:
    """Run `pgcheckpoint rotate-key`."""
    from ..codec.crypto import EncryptedSerde
    from ..codec.labels import PLAINTEXT_LABEL
    from ..codec.strict import StrictSerializer
    from ..drivers.rotate_key import rotate_key
    from ..errors import InvalidInputError
    from ..maintenance.rotation import VALUE_KINDS
    from .progress import Progress

    dsn = resolve_dsn(args)
    schema = resolve_schema(args)
    filterable = [k.strip() for k in args.filterable_metadata.split(",") if k.strip()]
    store_filterable = [k.strip() for k in args.store_filterable.split(",") if k.strip()]
    try:
        serde = EncryptedSerde.from_env(
            serde=StrictSerializer(),
            filterable_metadata=filterable,
            allow_plaintext=args.allow_plaintext,
        )
    except InvalidInputError as exc:
        raise CliError(str(exc), exit_code=EXIT_USAGE) from None

    if args.dry_run:
        report = rotate_key(dsn, serde, schema=schema, dry_run=True)
        _print_counts(report.counts, serde.active, VALUE_KINDS)
        print(f"{report.to_rotate} values to re-encrypt under key {serde.active!r}")
        plaintext = sum(report.counts.get(PLAINTEXT_LABEL, {}).values())
        if plaintext and not args.allow_plaintext:
            print(
                f"{plaintext} of them are stored without encryption, which the run refuses: "
                "to encrypt them too, run `pgcheckpoint rotate-key --allow-plaintext "
                "--filterable-metadata KEYS` (the metadata keys the application keeps "
                "readable, default source,step)"
                + (
                    ", with --store-filterable FIELDS for the store's items (the fields "
                    "its filters read, default none)"
                    if report.counts.get(PLAINTEXT_LABEL, {}).get("items")
                    else ""
                ),
                file=sys.stderr,
            )
        return EXIT_OK

    progress = Progress(f"re-encrypting under key {serde.active!r}", total=None)

    def advance(done: int, total: int) -> None:
        progress.total = total
        progress.advance(done - progress.done)

    with progress:
        report = rotate_key(
            dsn,
            serde,
            schema=schema,
            batch_size=args.batch_size,
            progress=advance,
            store_filterable=store_filterable,
        )
    line = f"re-encrypted {report.rotated} values under key {serde.active!r}"
    if report.skipped:
        line += (
            f"; {report.skipped} rows the application saved again meanwhile were left "
            "as it saved them"
        )
    print(line)
    remaining = report.remaining or {}
    if remaining:
        listed = ", ".join(f"{label}: {n}" for label, n in sorted(remaining.items()))
        print(
            f"{sum(remaining.values())} values are still not under key {serde.active!r} "
            f"({listed}): make sure every writer runs this version of pgcheckpoint with "
            f"key {serde.active!r} first in PGCHECKPOINT_AES_KEYS, then run "
            "`pgcheckpoint rotate-key` again",
            file=sys.stderr,
        )
        return EXIT_FAILED
    others = [k for k in serde.key_ids if k != serde.active]
    if others:
        print(
            f"no value is left under another key: keys {others!r} can be removed from "
            "PGCHECKPOINT_AES_KEYS"
        )
    for line in _settings_that_can_go(report.counts, serde):
        print(line)
    return EXIT_OK


def _settings_that_can_go(counts: dict[str, dict[str, int]], serde: Any) -> list[str]:
    """What the operator can now turn off, as the rotation left no value needing it."""
    from ..codec.crypto import ACCEPT_FORMAT_1_ENV, ACCEPT_LANGGRAPH_EAX_ENV, LANGGRAPH_KEY_ID
    from ..codec.labels import LANGGRAPH_EAX_LABEL, LANGGRAPH_KEY_ENV

    lines = []
    if serde.reads_langgraph_eax:
        if serde.active == LANGGRAPH_KEY_ID:
            how = f"set {ACCEPT_LANGGRAPH_EAX_ENV}=0 (accept_langgraph_eax=False)"
        else:
            how = f"remove {LANGGRAPH_KEY_ENV}, or set {ACCEPT_LANGGRAPH_EAX_ENV}=0"
        moved = sum(counts.get(LANGGRAPH_EAX_LABEL, {}).values())
        lines.append(
            f"no value is left in LangGraph's own format ({moved} rewritten), which is not "
            f"bound to its row: {how} so that none is read again"
        )
    if serde.accept_format_1:
        moved = sum(sum(n.values()) for label, n in counts.items() if label.endswith("(0.1.0)"))
        lines.append(
            f"no row sealed by pgcheckpoint 0.1.0 is left ({moved} rewritten in row format 2): "
            f"set {ACCEPT_FORMAT_1_ENV}=0 (accept_format_1=False) so that none is read again"
        )
    return lines


def _print_counts(counts: dict[str, dict[str, int]], active: str, kinds: tuple[str, ...]) -> None:
    header = ["key", *kinds, "total"]
    rows = []
    for label in sorted(counts, key=lambda k: (k != active, k)):
        per_kind = counts[label]
        name = f"{label} (active)" if label == active else label
        rows.append([name, *(str(per_kind.get(k, 0)) for k in kinds), str(sum(per_kind.values()))])
    if not rows:
        print("no stored values")
        return
    print_table([header, *rows])
