"""_function: what the function forms of the guard decide, for both shells.

claimd.idempotent (guard.py, aio.py) and guarded's key=/payload= take their
delivery from the function's own arguments: Calls says how (key= a callable
or a JMESPath expression, payload= the part to validate), and the answers
below turn a guard's result into the function's value or its exception. The
shells only make the calls.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

import jmespath
import jmespath.parser

from claimd._core import GuardKey, GuardResult
from claimd.errors import ClaimdError, Deferred, InProgress, PermanentError, Superseded
from claimd.serialize import Serializer, canonical_json
from claimd.types import Delivery, EventRef, EventState, Outcome

KeySpec = str | Callable[..., GuardKey] | None
"""KeySpec is a guard's key=: a JMESPath expression read from the event (the
function's first argument, or argument=), a callable given the function's
arguments that returns an event id, an EventRef or a Delivery, or None."""

PayloadSpec = str | Callable[..., Any] | None
"""PayloadSpec is a guard's payload=: a JMESPath expression, or a callable
given the function's arguments, whose value is hashed for payload
validation (a duplicate with another value is PAYLOAD_MISMATCH)."""


class MissingKey(ValueError):
    """MissingKey: key= found no idempotency key in the event (a JMESPath
    expression that selects nothing). The function does not run: claimd
    never runs a guarded function without a key (Powertools' default warns
    and runs it unguarded; its raise_on_no_idempotency_key=True is claimd's
    only behaviour)."""


def _data(value: Any) -> Any:
    """_data is what a JMESPath expression reads of an argument: a Delivery's
    JSON body, JSON text parsed, a dataclass or pydantic model as its JSON
    object, anything else as it is."""
    if isinstance(value, Delivery):
        value = value.body
    if isinstance(value, (bytes, bytearray, str)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    if isinstance(value, (Mapping, list, tuple, int, float, bool)) or value is None:
        return value
    return json.loads(canonical_json(value))


def key_text(found: Any) -> str:
    """key_text is the event id of a key found by JMESPath: a string as it
    is, a number or boolean as its JSON, anything else (a multi-select) as
    the SHA-256 hex of its canonical JSON."""
    if isinstance(found, str):
        return found
    if isinstance(found, (bool, int, float)):
        return json.dumps(found)
    return hashlib.sha256(canonical_json(found)).hexdigest()


def _missing(found: Any) -> bool:
    if isinstance(found, Mapping):
        return all(v is None for v in found.values())
    if isinstance(found, (list, tuple)):
        return all(v is None for v in found)
    if isinstance(found, (bool, int, float)):
        return False
    return not found


def payload_digest(value: Any) -> bytes:
    """payload_digest is the payload_sha256 of the part payload= selected:
    the SHA-256 of bytes as they are, of anything else's canonical JSON."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return hashlib.sha256(bytes(value)).digest()
    return hashlib.sha256(canonical_json(value)).digest()


class Calls:
    """Calls reads a function call's delivery: its key (and the payload
    digest) from the function's own arguments. argument names the parameter
    the JMESPath expressions read (default: the function's first argument);
    guard_first says that fn takes the guard before them (guarded)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        key: KeySpec,
        payload: PayloadSpec,
        argument: str | None = None,
        guard_first: bool = False,
    ) -> None:
        self._fn = fn
        self._key_expr: jmespath.parser.ParsedResult | None = None
        self._key_fn: Callable[..., GuardKey] | None = None
        if isinstance(key, str):
            self._key_expr = jmespath.compile(key)
        else:
            self._key_fn = key
        self._payload_expr: jmespath.parser.ParsedResult | None = None
        self._payload_fn: Callable[..., Any] | None = None
        if isinstance(payload, str):
            self._payload_expr = jmespath.compile(payload)
        else:
            self._payload_fn = payload
        self._argument = argument
        self._guard_first = guard_first
        self._signature = inspect.signature(fn) if argument is not None else None
        if self._signature is not None and argument not in self._signature.parameters:
            raise ValueError(f"argument={argument!r}: {fn.__qualname__} has no such parameter")

    def _subject(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """_subject is the argument the JMESPath expressions read."""
        if self._signature is not None and self._argument is not None:
            lead = (None,) if self._guard_first else ()
            bound = self._signature.bind_partial(*lead, *args, **kwargs)
            if self._argument not in bound.arguments:
                raise TypeError(f"{self._fn.__qualname__}: argument {self._argument!r} not given")
            return bound.arguments[self._argument]
        if args:
            return args[0]
        if len(kwargs) == 1:
            return next(iter(kwargs.values()))
        raise TypeError(f"{self._fn.__qualname__}: name the event's parameter with argument=")

    def delivery(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[GuardKey, bytes | None]:
        """delivery is the call's key and payload digest (None without
        payload=), read from the function's own arguments."""
        key = self.key(args, kwargs)
        return key, self.digest(args, kwargs, key)

    def key(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> GuardKey:
        """key is the call's key: key='s, or the event argument itself."""
        key: Any
        if self._key_fn is not None:
            key = self._key_fn(*args, **kwargs)
        elif self._key_expr is not None:
            found = self._key_expr.search(_data(self._subject(args, kwargs)))
            if _missing(found):
                raise MissingKey(f"no idempotency key at {self._key_expr.expression!r}")
            key = key_text(found)
        else:
            key = self._subject(args, kwargs)
        if not isinstance(key, (str, EventRef, Delivery)):
            raise TypeError(
                f"{self._fn.__qualname__}: the key is a {type(key).__name__}, want an event id (str), an EventRef "
                "or a Delivery; pass key= (a JMESPath expression or a callable)"
            )
        if isinstance(key, str) and not key:
            raise MissingKey("the idempotency key is empty")
        return key

    def digest(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], key: GuardKey) -> bytes | None:
        """digest is the payload_sha256 of payload='s part of the call's
        event (None without payload=); a key that is a raw Delivery cannot
        have one (claimd hashes its whole body)."""
        if self._payload_expr is None and self._payload_fn is None:
            return None
        if isinstance(key, Delivery):
            raise TypeError(
                "payload= needs a key by event id: claimd hashes a raw Delivery's whole body; "
                "pass key= to read the event id from it"
            )
        if self._payload_fn is not None:
            part = self._payload_fn(*args, **kwargs)
        else:
            assert self._payload_expr is not None
            part = self._payload_expr.search(_data(self._subject(args, kwargs)))
        return payload_digest(part)


def keyed_split(args: tuple[Any, ...]) -> tuple[GuardKey, tuple[Any, ...]]:
    """keyed_split is a keyed guarded function's key and the function's own
    arguments."""
    if not args:
        raise TypeError("a guarded function takes the delivery first: an event id, an EventRef or a Delivery")
    return args[0], args[1:]


def unowned_value(result: GuardResult, serializer: Serializer) -> Any:
    """unowned_value is claimd.idempotent's answer to a call that did not
    acquire the key: a duplicate's stored value, as the function returned
    it; PermanentError for a key that failed for good; InProgress,
    PayloadMismatch, Deferred, Superseded; or the ClaimdError the claim
    raised."""
    claim = result.claim
    if claim is None or claim.outcome == Outcome.ACQUIRED:
        raise result.error or ClaimdError(f"claim answered {result.status}")
    where = f"{claim.namespace}/{claim.provider}/{claim.key}"
    if claim.outcome == Outcome.DUPLICATE:
        if claim.state == EventState.FAILED:
            raise PermanentError(result.body.decode("utf-8", "replace"))
        return serializer.loads(result.body)
    if claim.outcome == Outcome.IN_PROGRESS:
        raise InProgress(f"{where} is in progress elsewhere", retry_after=result.retry_after)
    if claim.outcome == Outcome.DEFERRED:
        raise Deferred(f"{where} arrived before its prerequisite", retry_after=result.retry_after)
    if claim.outcome == Outcome.SUPERSEDED:
        raise Superseded(f"{where} is superseded by a later state of its entity")
    raise result.error or ClaimdError(f"claim answered outcome {claim.outcome!r}")


def settled_value(result: GuardResult, value: Any, stored: bytes, serializer: Serializer) -> Any:
    """settled_value is claimd.idempotent's answer once it settled the
    function's value: the value itself when claimd stored it; the stored one
    when another result stands (the handler settled itself, or an earlier
    holder's effect did: GUARD.md rows 18 and 23); the error when the settle
    was not recorded (taken over, claimd unreachable)."""
    if result.status != 200:
        raise result.error or ClaimdError(f"settle answered {result.status}")
    if result.body != stored:
        return serializer.loads(result.body)
    return value


__all__ = [
    "Calls",
    "KeySpec",
    "MissingKey",
    "PayloadSpec",
    "keyed_split",
    "payload_digest",
    "settled_value",
    "unowned_value",
]
