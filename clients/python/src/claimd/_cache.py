"""_cache: the client's duplicate cache, off unless Client(local_cache=N).

A receiver that settled a delivery, or was told it is a DUPLICATE, answers
the provider's next retries of it from memory instead of asking claimd. What
is kept is only what cannot change: a settled or failed record's outcome and
result, for the window claimd keeps it (its window_expires_at, read on the
local clock). Nothing owned is kept (no ACQUIRED claim, no IN_PROGRESS), so a
cached answer never lets a handler run or keeps one from running.

Only claims by event id are answered from it: a raw Delivery's key is derived
by claimd's rules (a header, a JSON field), which the client does not know.
Claims of entity lifecycles always ask claimd. A claim with a payload digest
other than the stored one asks claimd too (which answers PAYLOAD_MISMATCH).
The cache is bounded: least recently used entries go first.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Callable
from datetime import datetime, timezone

from claimd.types import Claim, EventState, KeySource, Outcome, Reason, Record, Tier

SCOPE_SEPARATOR = "\x1f"
"""SCOPE_SEPARATOR joins an event id and its scope into claimd's canonical
key (the server's ScopeSeparator)."""


@dataclasses.dataclass(frozen=True)
class _Entry:
    claim: Claim
    payload_sha256: bytes
    expires: datetime


class DuplicateCache:
    """DuplicateCache holds at most size settled answers (see the module
    doc). It is thread-safe and shared by a client's guards. now is its
    clock (tests set it)."""

    def __init__(self, size: int, *, now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        if size <= 0:
            raise ValueError(f"local_cache: {size} must be > 0 (None turns the cache off)")
        self.size = size
        self._entries: collections.OrderedDict[tuple[str, str, str], _Entry] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._now = now

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(
        self,
        namespace: str,
        provider: str,
        *,
        event_id: str | None,
        scope: str,
        payload_sha256: bytes | None,
        entity_id: str,
        attempt_id: str,
    ) -> Claim | None:
        """lookup is the cached DUPLICATE of a claim, or None to ask claimd."""
        if event_id is None or entity_id:
            return None
        k = (namespace, provider, event_id + SCOPE_SEPARATOR + scope if scope else event_id)
        with self._lock:
            entry = self._entries.get(k)
            if entry is None:
                return None
            if entry.expires <= self._now():
                del self._entries[k]
                return None
            if payload_sha256 and entry.payload_sha256 and payload_sha256 != entry.payload_sha256:
                return None
            self._entries.move_to_end(k)
        return dataclasses.replace(entry.claim, attempt_id=attempt_id)

    def remember_claim(self, claim: Claim, payload_sha256: bytes | None) -> None:
        """remember_claim keeps a DUPLICATE answer claimd gave (for the
        payload it was asked with, which claimd found equal)."""
        if claim.outcome != Outcome.DUPLICATE or claim.key_source != KeySource.EVENT_ID:
            return
        if claim.entity is not None:
            return
        self._put(claim, payload_sha256 or b"")

    def remember_record(self, rec: Record) -> None:
        """remember_record keeps a record this client settled or failed: its
        next duplicate is answered as claimd would."""
        if rec.state not in (EventState.SETTLED, EventState.FAILED) or rec.released:
            return
        claim = Claim(
            namespace=rec.namespace,
            provider=rec.provider,
            outcome=Outcome.DUPLICATE,
            reason=Reason.UNSPECIFIED,
            key=rec.key,
            key_source=KeySource.EVENT_ID,
            fencing_token=rec.fencing_token,
            state=rec.state,
            lease_expires_at=None,
            window_expires_at=rec.window_expires_at,
            ttl=None,
            attempt=rec.attempt,
            first_seen_at=rec.first_seen_at,
            result=rec.result,
            served_by=Tier.UNSPECIFIED,
            holder=rec.holder,
        )
        self._put(claim, rec.payload_sha256)

    def _put(self, claim: Claim, payload_sha256: bytes) -> None:
        expires = claim.window_expires_at
        if expires is None or expires <= self._now():
            return
        kept = dataclasses.replace(claim, cached=True, attempt_id="", lease_secret=b"")
        entry = _Entry(kept, payload_sha256, expires)
        k = (claim.namespace, claim.provider, claim.key)
        with self._lock:
            self._entries[k] = entry
            self._entries.move_to_end(k)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
