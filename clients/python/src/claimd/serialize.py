"""serialize: the one serializer of the Python client, for the guards'
results (clients/GUARD.md, Results) and claimd.idempotent's typed values.

Encoding follows the guards' rule: bytes-like as they are, str as UTF-8, None
as empty, anything else as compact JSON in UTF-8 (no spaces, non-ASCII kept,
NaN and infinities refused). JSON knows more than the json module does:

    dataclasses         an object of their fields (dataclasses.asdict)
    pydantic models     model_dump(mode="json"), when pydantic is installed
    Decimal             its exact text, "12.30" (a JSON number would round it)
    datetime, date, time   ISO 8601 text
    UUID                its text
    Enum                its value

A user's encoder= runs first and may return anything the rule takes (bytes
for full control, or a JSON value). Decoding is the way back: a user's
decoder= gets the stored bytes; otherwise the return annotation of the
guarded function says which type to rebuild (the types above, and list,
dict, tuple, Optional and unions of them); without one a duplicate gets the
JSON value, or the text when the bytes are not JSON.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import types
import typing
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from claimd.types import MAX_RESULT_BYTES

Encoder = Callable[[Any], Any]
"""Encoder turns a handler's result into what the guards' rule encodes:
bytes, str, None or a JSON value (a dataclass, a pydantic model, ...)."""

Decoder = Callable[[bytes], Any]
"""Decoder turns a stored result back into the handler's value."""

_NO_TYPE: Any = object()
"""_NO_TYPE: no return annotation; a duplicate gets the JSON value."""


class ResultNotStorable(ValueError):
    """ResultNotStorable: the handler's result cannot be stored (it cannot be
    encoded, or it is over MAX_RESULT_BYTES encoded). claimd.idempotent raises
    it before the guard settles: nothing is stored, the claim is left to its
    lease (the side effect may have happened, so it is never released), and
    the next delivery after the lease runs the function again with reason
    LEASE_EXPIRED. Fix the type (encoder=) rather than catch it."""


def json_default(obj: Any) -> Any:
    """json_default is the json `default` hook of the rule: what JSON becomes
    of the types json does not know. It raises TypeError for any other."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    dump = getattr(obj, "model_dump", None)
    if callable(dump) and not isinstance(obj, type):
        return dump(mode="json")  # a pydantic v2 model
    if isinstance(obj, Decimal):
        if not obj.is_finite():
            raise ValueError(f"Decimal {obj} is not a finite number")
        return str(obj)
    if isinstance(obj, (dt.datetime, dt.date, dt.time)):
        return obj.isoformat()
    if isinstance(obj, uuid.UUID):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def canonical_json(value: Any) -> bytes:
    """canonical_json is value as compact JSON with sorted keys, by the hooks
    of json_default: the bytes hashed for a key or a payload digest."""
    return json.dumps(
        value, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False, default=json_default
    ).encode("utf-8")


def encode(result: object) -> bytes:
    """encode applies the guards' result rule (see the module doc). It raises
    what the encoder raises for a value it cannot encode: TypeError for an
    unknown type, ValueError for NaN, a cycle or text that is not UTF-8."""
    if result is None:
        return b""
    if isinstance(result, (bytes, bytearray, memoryview)):
        return bytes(result)
    if isinstance(result, str):
        return result.encode("utf-8")
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=json_default).encode(
        "utf-8"
    )


class Serializer:
    """Serializer encodes a function's results and decodes them for its
    duplicates: encoder (optional) runs before the rule, decoder (optional)
    replaces the decoding by returns (the function's return annotation;
    None when it has none)."""

    def __init__(
        self,
        *,
        encoder: Encoder | None = None,
        decoder: Decoder | None = None,
        returns: Any = _NO_TYPE,
    ) -> None:
        self.encoder = encoder
        self.decoder = decoder
        self.returns = returns

    @classmethod
    def for_function(cls, fn: Callable[..., Any], *, encoder: Encoder | None, decoder: Decoder | None) -> Serializer:
        """for_function is the serializer of fn: its return annotation (an
        awaited value's, for a coroutine function) decides the decoding."""
        try:
            returns = typing.get_type_hints(fn).get("return", _NO_TYPE)
        except Exception:  # an annotation that does not resolve: decode as JSON
            returns = _NO_TYPE
        return cls(encoder=encoder, decoder=decoder, returns=returns)

    def dumps(self, value: object) -> bytes:
        """dumps is value's stored bytes; ResultNotStorable when it cannot be
        encoded or is over MAX_RESULT_BYTES."""
        try:
            encoded = encode(self.encoder(value) if self.encoder is not None else value)
        except Exception as err:
            raise ResultNotStorable(f"result of type {type(value).__name__} cannot be encoded: {err}") from err
        if len(encoded) > MAX_RESULT_BYTES:
            raise ResultNotStorable(f"result is {len(encoded)} bytes encoded, over {MAX_RESULT_BYTES}")
        return encoded

    def loads(self, body: bytes) -> Any:
        """loads is the value stored as body, as the function returned it."""
        if self.decoder is not None:
            return self.decoder(body)
        return decode(body, self.returns)


def decode(body: bytes, tp: Any = _NO_TYPE) -> Any:
    """decode is body as a value of type tp (see the module doc)."""
    if tp is bytes:
        return body
    if tp is str:
        return body.decode("utf-8")
    if tp is None or tp is type(None):
        return None
    if not body:
        return None
    try:
        value = json.loads(body)
    except ValueError:
        if tp is _NO_TYPE:
            try:
                return body.decode("utf-8")
            except UnicodeDecodeError:
                return body
        raise
    return value if tp is _NO_TYPE else convert(value, tp)


def convert(value: Any, tp: Any) -> Any:
    """convert rebuilds a value of type tp from its JSON value."""
    if value is None or tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        last: Exception | None = None
        for member in args:
            if member is type(None):
                continue
            try:
                return convert(value, member)
            except (TypeError, ValueError, KeyError) as err:
                last = err
        raise ValueError(f"{value!r} is none of {tp}") from last
    if origin in (list, set, frozenset):
        item = args[0] if args else Any
        return origin(convert(v, item) for v in value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(convert(v, args[0]) for v in value)
        return tuple(convert(v, a) for v, a in zip(value, args, strict=False))
    if origin is dict:
        vt = args[1] if len(args) == 2 else Any
        return {k: convert(v, vt) for k, v in value.items()}
    if origin is not None:
        return value  # another generic (Mapping[...], Sequence[...]): the JSON value
    if not isinstance(tp, type):
        return value
    validate = getattr(tp, "model_validate", None)
    if callable(validate):
        return validate(value)  # a pydantic v2 model
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: convert(v, hints.get(k, Any)) for k, v in value.items() if k in fields})
    if issubclass(tp, bool):
        return tp(value)
    if issubclass(tp, enum.Enum):
        return tp(value)
    if issubclass(tp, Decimal):
        return tp(str(value))
    if issubclass(tp, dt.datetime):
        return tp.fromisoformat(value)
    if issubclass(tp, dt.date):
        return tp.fromisoformat(value)
    if issubclass(tp, dt.time):
        return tp.fromisoformat(value)
    if issubclass(tp, uuid.UUID):
        return tp(value)
    if tp in (int, float, str):
        return tp(value)
    return value
