"""`EncryptedSerde`: AES-256-GCM encryption of every stored value, bound to its row.

The savers serialise a value with the inner serializer, then call
`EncryptedSerde.seal` with the value's location and the columns of its row a
read relies on (`pgcheckpoint.codec.binding.sealed_aad`) as authenticated data. A
ciphertext moved to another row or thread, altered, truncated, read with the
wrong key, or whose bound columns were edited raises `DecryptionError` naming
the table, the row and the key id; a plaintext row is refused unless
`allow_plaintext=True`.

Stored values look like `(type, data)` with `type = "<inner type>+aesgcm2:<key id>"`
and `data = nonce (12 bytes) + ciphertext + tag (16 bytes)`. Rows written by
pgcheckpoint 0.1.0 (`+aesgcm:<key id>`, row format 1) are read while
`accept_format_1` is on; `pgcheckpoint rotate-key` rewrites them in format 2.

Example:
    >>> import os
    >>> serde = EncryptedSerde(keys={"k1": os.urandom(32)})
    >>> type_, data = serde.dumps_typed({"a": 1})
    >>> type_
    'msgpack+aesgcm2:k1'
    >>> serde.loads_typed((type_, data))
    {'a': 1}
"""

from __future__ import annotations

import base64
import binascii
import copy
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ..errors import DecryptionError, InvalidInputError
from .binding import (
    BOUND_COLUMNS,
    FORMAT_1,
    FORMAT_2,
    binding_kind,
    describe_row,
    seal_value,
    unseal_value,
)
from .labels import EAX_NAME, GCM_FORMAT_1_PREFIX, GCM_PREFIX, KEYS_ENV, LANGGRAPH_KEY_ENV

# pycryptodome (1 MiB of a worker's memory) is imported where a value is sealed
# or opened: `import pgcheckpoint` without encryption does not load it.

__all__ = [
    "ACCEPT_FORMAT_1_ENV",
    "ACCEPT_LANGGRAPH_EAX_ENV",
    "LANGGRAPH_KEY_ID",
    "EncryptedSerde",
]

ACCEPT_FORMAT_1_ENV = "PGCHECKPOINT_ACCEPT_FORMAT_1"
ACCEPT_LANGGRAPH_EAX_ENV = "PGCHECKPOINT_ACCEPT_LANGGRAPH_EAX"
# The GCM key derived from LANGGRAPH_AES_KEY is stored under this id.
LANGGRAPH_KEY_ID = "langgraph"
DEFAULT_FILTERABLE_METADATA = ("source", "step")

_KEY_BYTES = 32
_NONCE_BYTES = 12
_TAG_BYTES = 16
_EAX_NONCE_BYTES = 16
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
_GENERATE = (
    'generate one with: python -c "import base64, os; '
    'print(base64.b64encode(os.urandom(32)).decode())"'
)


def _env_switch(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in ("", "1", "true", "on", "yes"):
        return True
    if value in ("0", "false", "off", "no"):
        return False
    raise InvalidInputError(f"{name}={value!r} is not understood; set it to 1 or 0")


# base64 with the URL-safe alphabet (`-` and `_`), padded
_URLSAFE_BASE64 = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def _decode_base64(text: str) -> bytes:
    # strict: a character outside the alphabet is an error, not skipped
    text = text.strip()
    padded = text + "=" * (-len(text) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except binascii.Error:
        if not _URLSAFE_BASE64.fullmatch(padded):
            raise
        return base64.urlsafe_b64decode(padded.encode("ascii"))


def parse_keys(value: str, *, source: str = KEYS_ENV) -> dict[str, bytes]:
    """Parse `id:base64key[,id:base64key...]`, keeping the order (the first encrypts).

    Example:
        >>> key = base64.b64encode(bytes(32)).decode()
        >>> list(parse_keys(f"k2:{key}, k1:{key}"))
        ['k2', 'k1']
    """
    keys: dict[str, bytes] = {}
    for position, entry in enumerate(value.split(","), start=1):
        entry = entry.strip()
        if not entry:
            continue
        key_id, sep, encoded = entry.partition(":")
        key_id = key_id.strip()
        if not sep or not key_id:
            raise InvalidInputError(
                f"entry {position} of {source} has no key id; "
                "write each key as id:base64key, separated by commas"
            )
        if key_id in keys:
            raise InvalidInputError(f"key id {key_id!r} appears twice in {source}; ids must differ")
        try:
            keys[key_id] = _decode_base64(encoded)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise InvalidInputError(
                f"key {key_id!r} in {source} is not valid base64; {_GENERATE}"
            ) from None
    return keys


def _check_key(key_id: str, key: Any, source: str) -> bytes:
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise InvalidInputError(
            f"key id {key_id!r} in {source} is not allowed; use 1-32 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    if not isinstance(key, bytes | bytearray | memoryview):
        raise InvalidInputError(
            f"key {key_id!r} in {source} must be bytes, not {type(key).__name__}; "
            "decode a base64 key with base64.b64decode first"
        )
    raw = bytes(key)
    if len(raw) != _KEY_BYTES:
        raise InvalidInputError(
            f"key {key_id!r} in {source} is {len(raw)} bytes long; AES-256 needs exactly "
            f"{_KEY_BYTES} bytes: {_GENERATE}"
        )
    return raw


def _check_langgraph_key(key: Any, source: str) -> bytes:
    if isinstance(key, str):
        key = key.encode()  # LangGraph reads the variable's text as the raw key
    if not isinstance(key, bytes | bytearray | memoryview):
        raise InvalidInputError(f"{source} must be bytes or str, not {type(key).__name__}")
    raw = bytes(key)
    if len(raw) not in (16, 24, 32):
        raise InvalidInputError(
            f"{source} is {len(raw)} bytes long; LangGraph's AES key must be 16, 24 or 32 bytes"
        )
    return raw


def _derive_from_langgraph(key: bytes) -> bytes:
    from Crypto.Hash import SHA256
    from Crypto.Protocol.KDF import HKDF

    # A separate key for GCM: one key must not serve two AES modes.
    derived = HKDF(key, _KEY_BYTES, b"pgcheckpoint", SHA256, context=b"aes-256-gcm")
    return bytes(derived if isinstance(derived, bytes) else derived[0])


class EncryptedSerde:
    """Encrypts every value with AES-256-GCM, bound to the row that stores it.

    Pass it as the saver's `serde`. The first key encrypts; every key listed
    decrypts, so a key can be rotated without downtime (`pgcheckpoint rotate-key`).
    Used on its own (`dumps_typed`/`loads_typed`, for example with another
    saver) the values are encrypted but not bound to a row.

    Args:
        keys: Key id to 32-byte key. Ids go into the stored type
            (`msgpack+aesgcm:<id>`), so pick short stable names such as `k1`.
        active: The id of the key that encrypts (default: the first of `keys`).
        serde: The serializer of the plaintext (default `JsonPlusSerializer`).
        filterable_metadata: Metadata keys kept readable in the `metadata`
            JSONB column, so `list(filter=...)` can search them. Every other
            key is only in the encrypted copy, and filtering on it is refused.
        allow_plaintext: Read values stored without encryption (while
            migrating a database written without it) instead of refusing them.
        langgraph_key: The key of LangGraph's `EncryptedSerializer` (the value
            of `LANGGRAPH_AES_KEY`): values it wrote can then be read. Without
            `keys`, a key derived from it (id `langgraph`) encrypts.
        accept_langgraph_eax: Read values in LangGraph's own format (AES-EAX)
            when `langgraph_key` is given. They are not bound to their row: set
            it to False once `pgcheckpoint rotate-key` reports none is left.
        accept_format_1: Read rows sealed by pgcheckpoint 0.1.0, whose columns
            around the value are not authenticated; set it to False once
            `pgcheckpoint rotate-key` reports none is left.
        compress: Compress values before encrypting them. Off by default: the
            size of a compressed value tells an attacker who can read sizes
            and add text to a value whether that text repeats what is there.

    Raises:
        InvalidInputError: A key has the wrong length or id, or no key is given.

    Example:
        >>> serde = EncryptedSerde(keys={"k2": os.urandom(32), "k1": os.urandom(32)})
        >>> serde.active
        'k2'
        >>> saver = PostgresSaver(pool, serde=serde)  # doctest: +SKIP
    """

    def __init__(
        self,
        keys: Mapping[str, bytes] | None = None,
        active: str | None = None,
        *,
        serde: SerializerProtocol | None = None,
        filterable_metadata: Iterable[str] = DEFAULT_FILTERABLE_METADATA,
        allow_plaintext: bool = False,
        langgraph_key: bytes | str | None = None,
        accept_langgraph_eax: bool = True,
        accept_format_1: bool = True,
        compress: bool = False,
    ) -> None:
        self._configure(
            keys,
            active,
            serde=serde,
            filterable_metadata=filterable_metadata,
            allow_plaintext=allow_plaintext,
            langgraph_key=langgraph_key,
            keys_source="keys",
            langgraph_source="langgraph_key",
        )
        self.accept_langgraph_eax = accept_langgraph_eax
        self.accept_format_1 = accept_format_1
        self.compress = compress

    def _configure(
        self,
        keys: Mapping[str, bytes] | None,
        active: str | None,
        *,
        serde: SerializerProtocol | None,
        filterable_metadata: Iterable[str],
        allow_plaintext: bool,
        langgraph_key: bytes | str | None,
        keys_source: str,
        langgraph_source: str,
    ) -> None:
        # The sources name where a bad key came from: an argument or a variable.
        checked: dict[str, bytes] = {}
        for key_id, key in (keys or {}).items():
            checked[key_id] = _check_key(key_id, key, keys_source)
        self._legacy_key: bytes | None = None
        if langgraph_key is not None:
            self._legacy_key = _check_langgraph_key(langgraph_key, langgraph_source)
            if LANGGRAPH_KEY_ID in checked:
                raise InvalidInputError(
                    f"key id {LANGGRAPH_KEY_ID!r} is reserved for the key derived from "
                    f"{langgraph_source}; rename that key in {keys_source}"
                )
            checked[LANGGRAPH_KEY_ID] = _derive_from_langgraph(self._legacy_key)
        if not checked:
            raise InvalidInputError(
                f"no encryption key given: pass keys={{'k1': <32 bytes>}} or set {KEYS_ENV}; "
                + _GENERATE
            )
        if active is None:
            active = next(iter(checked))
        if active not in checked:
            raise InvalidInputError(
                f"active key {active!r} is not among the keys given ({sorted(checked)!r}); "
                "pass one of them"
            )
        if isinstance(filterable_metadata, str):
            raise InvalidInputError(
                "filterable_metadata must be a list of metadata keys, not one string"
            )
        self._keys = checked
        self.active = active
        self.inner: SerializerProtocol = serde if serde is not None else JsonPlusSerializer()
        self.filterable_metadata: tuple[str, ...] = tuple(dict.fromkeys(filterable_metadata))
        self.allow_plaintext = allow_plaintext

    @classmethod
    def from_env(
        cls,
        *,
        serde: SerializerProtocol | None = None,
        filterable_metadata: Iterable[str] = DEFAULT_FILTERABLE_METADATA,
        allow_plaintext: bool = False,
        compress: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> EncryptedSerde:
        """Keys from `PGCHECKPOINT_AES_KEYS` (and `LANGGRAPH_AES_KEY`, if set).

        `PGCHECKPOINT_AES_KEYS` is `id:base64key[,id:base64key...]`; the first
        key encrypts. `LANGGRAPH_AES_KEY` (LangGraph's raw 16/24/32-byte key)
        lets values written by LangGraph's `EncryptedSerializer` be read; set
        alone, a key derived from it encrypts too.
        `PGCHECKPOINT_ACCEPT_LANGGRAPH_EAX=0` and `PGCHECKPOINT_ACCEPT_FORMAT_1=0`
        stop reading values in LangGraph's format and rows sealed by
        pgcheckpoint 0.1.0 (`accept_langgraph_eax`, `accept_format_1`).

        Example:
            >>> key = base64.b64encode(os.urandom(32)).decode()
            >>> EncryptedSerde.from_env(environ={"PGCHECKPOINT_AES_KEYS": f"k1:{key}"}).active
            'k1'
        """
        env = os.environ if environ is None else environ
        listed = env.get(KEYS_ENV, "").strip()
        legacy = env.get(LANGGRAPH_KEY_ENV) or None
        if not listed and legacy is None:
            raise InvalidInputError(
                f"no encryption key: set {KEYS_ENV}=k1:<base64 key> (or {LANGGRAPH_KEY_ENV}); "
                + _GENERATE
            )
        keys = parse_keys(listed) if listed else {}
        if listed and not keys:
            raise InvalidInputError(f"{KEYS_ENV} lists no key; write it as id:base64key[,...]")
        serde_ = cls.__new__(cls)
        serde_._configure(
            keys,
            None,
            serde=serde,
            filterable_metadata=filterable_metadata,
            allow_plaintext=allow_plaintext,
            langgraph_key=legacy,
            keys_source=KEYS_ENV,
            langgraph_source=LANGGRAPH_KEY_ENV,
        )
        serde_.accept_langgraph_eax = _env_switch(env, ACCEPT_LANGGRAPH_EAX_ENV)
        serde_.accept_format_1 = _env_switch(env, ACCEPT_FORMAT_1_ENV)
        serde_.compress = compress
        return serde_

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of the keys that decrypt, the active one first.

        Example:
            >>> EncryptedSerde(keys={"k1": bytes(32)}).key_ids
            ('k1',)
        """
        return (self.active, *(k for k in self._keys if k != self.active))

    @property
    def active_suffix(self) -> str:
        """The end of the type of every value the active key encrypts.

        Example:
            >>> EncryptedSerde(keys={"k1": bytes(32)}).active_suffix
            '+aesgcm2:k1'
        """
        return f"+{GCM_PREFIX}{self.active}"

    @property
    def reads_langgraph_eax(self) -> bool:
        """Whether values in LangGraph's own format (not bound to a row) are read.

        Example:
            >>> EncryptedSerde(keys={"k1": bytes(32)}).reads_langgraph_eax
            False
        """
        return self._legacy_key is not None and self.accept_langgraph_eax

    def __repr__(self) -> str:
        return (
            f"EncryptedSerde(active={self.active!r}, key_ids={list(self.key_ids)!r}, "
            f"filterable_metadata={self.filterable_metadata!r}, "
            f"allow_plaintext={self.allow_plaintext!r}, "
            f"accept_langgraph_eax={self.reads_langgraph_eax!r}, "
            f"accept_format_1={self.accept_format_1!r}, compress={self.compress!r})"
        )

    # -- the Sealer protocol (used by the savers) ------------------------------------

    def seal(self, data: bytes, aad: bytes) -> tuple[str, bytes]:
        """Encrypt `data` under the active key, authenticating `aad` (the row's binding).

        Example:
            >>> serde = EncryptedSerde(keys={"k1": bytes(32)})
            >>> suffix, sealed = serde.seal(b"hi", b"blob")
            >>> suffix, len(sealed)
            ('aesgcm2:k1', 30)
        """
        from Crypto.Cipher import AES
        from Crypto.Random import get_random_bytes

        nonce = get_random_bytes(_NONCE_BYTES)
        cipher = AES.new(self._keys[self.active], AES.MODE_GCM, nonce=nonce, mac_len=_TAG_BYTES)
        cipher.update(aad)
        ciphertext, tag = cipher.encrypt_and_digest(data)
        return GCM_PREFIX + self.active, nonce + ciphertext + tag

    def row_format(self, type_: str) -> int:
        """The layout of the authenticated data a stored type was sealed with.

        Example:
            >>> serde = EncryptedSerde(keys={"k1": bytes(32)})
            >>> serde.row_format("msgpack+aesgcm2:k1"), serde.row_format("msgpack+aesgcm:k1")
            (2, 1)
        """
        return FORMAT_2 if type_.rpartition("+")[2].startswith(GCM_PREFIX) else FORMAT_1

    def unseal(self, type_: str, data: bytes, aad: bytes) -> tuple[str, bytes]:
        """Decrypt a stored value; return its type without the cipher part, and the plaintext.

        Raises:
            DecryptionError: Wrong or missing key, altered, truncated or moved
                ciphertext, or a value in a format this serde is set not to
                read (plaintext, LangGraph's EAX, pgcheckpoint 0.1.0's rows).

        Example:
            >>> serde = EncryptedSerde(keys={"k1": bytes(32)})
            >>> suffix, sealed = serde.seal(b"hi", b"blob")
            >>> serde.unseal("bytes+" + suffix, sealed, b"blob")
            ('bytes', b'hi')
        """
        data = bytes(data or b"")
        inner, sep, last = (type_ or "").rpartition("+")
        if sep and last.startswith(GCM_PREFIX):
            return inner, self._open_gcm(last[len(GCM_PREFIX) :], data, aad)
        if sep and last.startswith(GCM_FORMAT_1_PREFIX):
            if not self.accept_format_1:
                raise DecryptionError(
                    f"{describe_row(aad)} was sealed by pgcheckpoint 0.1.0 (type {type_!r}), whose "
                    "rows do not authenticate their columns, and accept_format_1 is off; "
                    f"run `pgcheckpoint rotate-key` with {ACCEPT_FORMAT_1_ENV}=1 to rewrite "
                    "such rows, or restore them from a backup"
                )
            return inner, self._open_gcm(last[len(GCM_FORMAT_1_PREFIX) :], data, aad)
        if sep and last == EAX_NAME:
            return inner, self._open_eax(type_, data, aad)
        if self.allow_plaintext:
            return type_, data
        raise DecryptionError(
            f"{describe_row(aad)} is stored unencrypted (type {type_!r}) and encryption "
            "is on, so it is refused; pass EncryptedSerde(allow_plaintext=True) while "
            "migrating a database written without encryption, then run "
            "`pgcheckpoint rotate-key --allow-plaintext`"
        )

    def _open_gcm(self, key_id: str, data: bytes, aad: bytes) -> bytes:
        where = describe_row(aad)
        key = self._keys.get(key_id)
        if key is None:
            raise DecryptionError(
                f"cannot decrypt {where}: it is encrypted under key {key_id!r}, which is not "
                f"configured (configured: {list(self.key_ids)!r}); add key {key_id!r} to "
                f"{KEYS_ENV}"
            )
        if len(data) < _NONCE_BYTES + _TAG_BYTES:
            raise DecryptionError(
                f"cannot decrypt {where} with key {key_id!r}: the ciphertext is {len(data)} "
                f"bytes, shorter than its nonce and tag ({_NONCE_BYTES + _TAG_BYTES}); it was "
                "truncated"
            )
        from Crypto.Cipher import AES

        cipher = AES.new(key, AES.MODE_GCM, nonce=data[:_NONCE_BYTES], mac_len=_TAG_BYTES)
        cipher.update(aad)
        try:
            return bytes(
                cipher.decrypt_and_verify(data[_NONCE_BYTES:-_TAG_BYTES], data[-_TAG_BYTES:])
            )
        except ValueError:
            columns = BOUND_COLUMNS.get(binding_kind(aad), ())
            if aad.startswith(b"2/") and columns:
                what = f"the value or a column bound to it ({', '.join(columns)}) was altered"
            else:
                what = "the value was altered"
            raise DecryptionError(
                f"cannot decrypt {where} with key {key_id!r}: authentication failed, so "
                f"{what} or truncated, belongs to another row or thread, or was encrypted "
                f"under another key named {key_id!r}; restore the row from a backup, or "
                "delete the thread"
            ) from None

    def _open_eax(self, type_: str, data: bytes, aad: bytes) -> bytes:
        where = describe_row(aad)
        if self._legacy_key is None:
            raise DecryptionError(
                f"cannot decrypt {where}: it was written by LangGraph's EncryptedSerializer "
                f"(type {type_!r}) and no LangGraph key is configured; set {LANGGRAPH_KEY_ENV} "
                "or pass langgraph_key="
            )
        if not self.accept_langgraph_eax:
            raise DecryptionError(
                f"{where} is in LangGraph's own format (type {type_!r}), which is not bound "
                f"to its row, and reading it is off ({ACCEPT_LANGGRAPH_EAX_ENV}=0 or "
                "accept_langgraph_eax=False); turn it on and run `pgcheckpoint rotate-key` "
                "to rewrite such values"
            )
        nonce = data[:_EAX_NONCE_BYTES]
        tag = data[_EAX_NONCE_BYTES : _EAX_NONCE_BYTES + _TAG_BYTES]
        if len(tag) < _TAG_BYTES:
            raise DecryptionError(
                f"cannot decrypt {where} with the {LANGGRAPH_KEY_ENV} key: the ciphertext is "
                f"{len(data)} bytes, shorter than its nonce and tag; it was truncated"
            )
        from Crypto.Cipher import AES

        cipher = AES.new(self._legacy_key, AES.MODE_EAX, nonce=nonce)
        try:
            return bytes(cipher.decrypt_and_verify(data[_EAX_NONCE_BYTES + _TAG_BYTES :], tag))
        except ValueError:
            raise DecryptionError(
                f"cannot decrypt {where} with the {LANGGRAPH_KEY_ENV} key: authentication "
                "failed, so the value was altered or truncated, or written under another key"
            ) from None

    # -- SerializerProtocol (unbound, for use outside pgcheckpoint's savers) ---------

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Serialise and encrypt `obj`, bound to no row.

        Example:
            >>> EncryptedSerde(keys={"k1": bytes(32)}).dumps_typed("x")[0]
            'msgpack+aesgcm2:k1'
        """
        return seal_value(self, *self.inner.dumps_typed(obj), b"")

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Decrypt and deserialise a value `dumps_typed` (or LangGraph's serializer) made.

        Example:
            >>> serde = EncryptedSerde(keys={"k1": bytes(32)})
            >>> serde.loads_typed(serde.dumps_typed([1, 2]))
            [1, 2]
        """
        return self.inner.loads_typed(unseal_value(self, *data, b""))

    def with_msgpack_allowlist(self, extra_allowlist: Iterable[Any]) -> EncryptedSerde:
        """A copy whose inner serializer accepts more msgpack types (LangGraph's strict mode).

        Example:
            >>> serde = EncryptedSerde(keys={"k1": bytes(32)})
            >>> serde.with_msgpack_allowlist([]) is serde
            True
        """
        widen = getattr(self.inner, "with_msgpack_allowlist", None)
        if widen is None:
            return self
        inner = widen(extra_allowlist)
        if inner is self.inner:
            return self
        clone = copy.copy(self)
        clone.inner = inner
        return clone
