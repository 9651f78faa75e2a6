"""claimd.powertools: claimd as the persistence store of Powertools for AWS
Lambda (Python) idempotency. Code that uses @idempotent or
@idempotent_function switches by changing its persistence store:

    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent
    from claimd.powertools import ClaimdPersistenceLayer

    persistence = ClaimdPersistenceLayer("claimd.internal:50051", namespace="orders", provider="lambda")

    @idempotent(persistence_store=persistence, config=IdempotencyConfig(event_key_jmespath="body"))
    def handler(event, context): ...

Powertools keeps deciding what to do (its IdempotencyConfig, its key and
payload hashing, its response hook and local cache); each record it reads or
writes is a claimd record, with claimd's fencing underneath:

    Powertools                         claimd
    put INPROGRESS (first call)        Claim with start: ACQUIRED keeps the
                                       lease secret and fencing token of the
                                       key until the call ends
    ... an existing record             DUPLICATE (COMPLETED, its stored
                                       response), IN_PROGRESS (INPROGRESS until
                                       the holder's lease ends): Powertools'
                                       IdempotencyItemAlreadyExistsError
                                       carries it
    payload validation                 the claim's payload_sha256 (the SHA-256
                                       of Powertools' payload hash): another
                                       payload is PAYLOAD_MISMATCH, raised as
                                       IdempotencyValidationError
    update to COMPLETED                Transition to SETTLED with the response,
                                       fenced by the key's token and secret
    delete (the function raised)       Release, fenced: the next call runs
    expires_after_seconds              the window: claimd keeps a record at
                                       least as long as the provider retries;
                                       a longer expires_after_seconds is sent
                                       as the claim's window
    in-progress expiry                 the claim's lease (lease=, default the
                                       provider's); a function that outlives
                                       it may be taken over, and its update is
                                       then refused (StaleToken) instead of
                                       overwriting the new holder's record

It needs the powertools extra: pip install 'claimd[powertools]'.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

try:
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyItemAlreadyExistsError,
        IdempotencyItemNotFoundError,
        IdempotencyValidationError,
    )
    from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
    from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS, DataRecord
except ImportError as err:  # pragma: no cover - the message is the point
    raise ImportError(
        "claimd.powertools needs Powertools for AWS Lambda (Python): pip install 'claimd[powertools]'"
    ) from err

from claimd.client import Client
from claimd.errors import NotFound, NotOwner, PermissionDenied, StaleToken
from claimd.types import Claim, EventState, Outcome, Record, Seconds

__all__ = ["ClaimdPersistenceLayer"]

log = logging.getLogger("claimd.powertools")

_MAX_HELD = 1024
"""_MAX_HELD: past this many claims held at once, abandoned ones are dropped."""

ABANDONED_AFTER = timedelta(minutes=15)
"""ABANDONED_AFTER: how long past its lease's end a held claim is kept."""

_COMPLETED = STATUS_CONSTANTS["COMPLETED"]
_INPROGRESS = STATUS_CONSTANTS["INPROGRESS"]


class _StoredRecord(DataRecord):
    """_StoredRecord is a DataRecord read from claimd, which keeps the
    SHA-256 of the payload hash it was claimed with, not the hash itself."""

    payload_sha256: bytes = b""


def _epoch(t: datetime | None) -> int | None:
    return int(t.timestamp()) if t is not None else None


def _response_data(result: bytes) -> str:
    """_response_data is a stored result as Powertools' response_data (JSON
    text): Powertools' own JSON as it is; text another claimd guard stored
    (any language's) as a JSON string, so that Powertools can read it."""
    text = result.decode("utf-8", "replace")
    if not text:
        return ""
    try:
        json.loads(text)
    except ValueError:
        return json.dumps(text)
    return text


class ClaimdPersistenceLayer(BasePersistenceLayer):
    """ClaimdPersistenceLayer is a Powertools persistence layer on claimd
    (see the module doc).

    client_or_address is a claimd.Client (shared, with its TLS, token and
    retry policy) or a claimd address to make one for (its keyword
    arguments in client_options). namespace and provider name where the
    records live: the provider's registry entry gives the lease, the window
    and the max_lease. lease overrides the provider's default lease (at most
    its max_lease), window the dedup window (at least the provider's). Without
    window, an expires_after_seconds longer than the provider's window is
    sent as the claim's window; reading the provider's window (once) needs
    the read role, and without it the provider's window stands.

    Powertools' idempotency key (function name and hash) is claimd's event id,
    so two functions never share a record, as in Powertools.
    """

    def __init__(
        self,
        client_or_address: Client | str,
        *,
        namespace: str,
        provider: str,
        lease: Seconds | None = None,
        window: Seconds | None = None,
        **client_options: Any,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if isinstance(client_or_address, Client):
            if client_options:
                raise TypeError("ClaimdPersistenceLayer: client options apply to an address, not to a Client")
            self.client = client_or_address
        else:
            self.client = Client(client_or_address, **client_options)
        self.namespace = namespace
        self.provider = provider
        self.lease = lease
        self.window = window
        self._held: dict[str, Claim] = {}
        self._lock = threading.Lock()
        self._provider_ttl: timedelta | None = None

    # --- Powertools' contract --------------------------------------------------

    def _put_record(self, data_record: DataRecord) -> None:
        """_put_record claims the key for an INPROGRESS record; an existing
        record raises IdempotencyItemAlreadyExistsError carrying it (or
        IdempotencyValidationError for another payload)."""
        key = data_record.idempotency_key
        digest = hashlib.sha256(data_record.payload_hash.encode()).digest() if data_record.payload_hash else None
        claim = self.client.claim(
            self.namespace,
            self.provider,
            event_id=key,
            payload_sha256=digest,
            lease=self.lease,
            window=self._window(),
            start=True,
        )
        if claim.acquired:
            with self._lock:
                if len(self._held) >= _MAX_HELD:
                    self._forget_abandoned()
                self._held[key] = claim
            return
        if claim.outcome == Outcome.PAYLOAD_MISMATCH:
            raise IdempotencyValidationError("Payload does not match stored record for this event key")
        existing = self._claimed_record(claim, data_record.payload_hash)
        self._save_to_cache(data_record=existing)
        raise IdempotencyItemAlreadyExistsError(old_data_record=existing)

    def _get_record(self, idempotency_key: str) -> DataRecord:
        """_get_record reads the key's record; a released one (the function
        raised) is no record, as Powertools' deleted item."""
        try:
            rec = self.client.get(self.namespace, self.provider, idempotency_key)
        except NotFound as err:
            raise IdempotencyItemNotFoundError(str(err)) from err
        if rec.released:
            raise IdempotencyItemNotFoundError(f"{idempotency_key} was released")
        return self._stored_record(rec)

    def _update_record(self, data_record: DataRecord) -> None:
        """_update_record settles the key with the function's response, as
        the holder of the claim _put_record made (its fencing token and lease
        secret). A claim taken over meanwhile raises StaleToken: the update
        is refused, and the new holder's record stands."""
        claim = self._take(data_record.idempotency_key)
        if claim is None:
            raise RuntimeError(f"ClaimdPersistenceLayer: no claim held for {data_record.idempotency_key}")
        result = (data_record.response_data or "").encode("utf-8")
        self.client.transition(claim, EventState.SETTLED, result=result)

    def _delete_record(self, data_record: DataRecord) -> None:
        """_delete_record releases the key after the function raised, so the
        next call runs it again. A key another holder took over meanwhile is
        theirs: nothing to release."""
        claim = self._take(data_record.idempotency_key)
        if claim is None:
            return
        try:
            self.client.release(claim)
        except (StaleToken, NotOwner) as err:
            log.warning("claimd.powertools: %s was taken over; not released: %s", claim.key, err)

    def _validate_payload(self, data_payload: Any, stored_data_record: DataRecord) -> None:
        """_validate_payload compares a payload with a record read from
        claimd by the SHA-256 claimd keeps; other records as Powertools does."""
        if isinstance(stored_data_record, _StoredRecord) and self.payload_validation_enabled:
            stored = stored_data_record.payload_sha256
            if not stored:
                return  # claimed without payload validation: claimd compares nothing either
            data_hash = (
                data_payload.payload_hash
                if isinstance(data_payload, DataRecord)
                else self._get_hashed_payload(data=data_payload)
            )
            if hashlib.sha256(data_hash.encode()).digest() != stored:
                raise IdempotencyValidationError("Payload does not match stored record for this event key")
            return
        super()._validate_payload(data_payload=data_payload, stored_data_record=stored_data_record)

    # --- claimd's side -------------------------------------------------------------

    def _forget_abandoned(self) -> None:
        """_forget_abandoned drops the claims of calls Powertools never
        finished (its own serializer raised before the update: the record
        stays in progress until its lease ends), once their lease ended
        ABANDONED_AFTER ago: a lapsed lease keeps its token until another
        holder takes over, so a slow call is given that long."""
        cutoff = datetime.now(timezone.utc) - ABANDONED_AFTER
        for k, c in list(self._held.items()):
            if c.lease_expires_at is not None and c.lease_expires_at < cutoff:
                del self._held[k]

    def _take(self, key: str) -> Claim | None:
        with self._lock:
            return self._held.pop(key, None)

    def _window(self) -> Seconds | None:
        """_window is the claim's window: window=, else expires_after_seconds
        when it is longer than the provider's window (claimd never keeps a
        record for less than the provider retries)."""
        if self.window is not None:
            return self.window
        if self._provider_ttl is None:
            try:
                self._provider_ttl = self.client.get_provider(self.provider).ttl or timedelta(0)
            except PermissionDenied as err:
                # A principal with the claim role only: keep the provider's
                # window, and say how to ask for a longer one.
                log.warning(
                    "claimd.powertools: cannot read provider %s (%s); expires_after_seconds is not sent as a "
                    "window: grant the read role, or pass window=",
                    self.provider,
                    err,
                )
                self._provider_ttl = timedelta.max
        wanted = timedelta(seconds=self.expires_after_seconds)
        return wanted if wanted > self._provider_ttl else None

    def _claimed_record(self, claim: Claim, payload_hash: str) -> DataRecord:
        """_claimed_record is the existing record a claim that did not
        acquire found, as Powertools reads it. claimd compared the payload
        already, so it carries this call's payload hash."""
        expiry = _epoch(claim.window_expires_at)
        if claim.outcome == Outcome.DUPLICATE:
            return DataRecord(
                idempotency_key=claim.key,
                status=_COMPLETED,
                expiry_timestamp=expiry,
                response_data=_response_data(claim.result),
                payload_hash=payload_hash,
            )
        if claim.outcome == Outcome.SUPERSEDED:
            return DataRecord(claim.key, status=_COMPLETED, expiry_timestamp=expiry, payload_hash=payload_hash)
        # IN_PROGRESS (another holder's live lease), DEFERRED (not yet).
        until = claim.lease_expires_at
        if claim.outcome == Outcome.DEFERRED and claim.retry_after is not None:
            until = datetime.now(timezone.utc) + claim.retry_after
        return DataRecord(
            idempotency_key=claim.key,
            status=_INPROGRESS,
            expiry_timestamp=expiry,
            in_progress_expiry_timestamp=int(until.timestamp() * 1000) if until is not None else None,
            payload_hash=payload_hash,
        )

    def _stored_record(self, rec: Record) -> DataRecord:
        if rec.state in (EventState.SETTLED, EventState.FAILED):
            stored = _StoredRecord(
                idempotency_key=rec.key,
                status=_COMPLETED,
                expiry_timestamp=_epoch(rec.window_expires_at),
                response_data=_response_data(rec.result),
            )
        else:
            until = rec.lease_expires_at
            stored = _StoredRecord(
                idempotency_key=rec.key,
                status=_INPROGRESS,
                expiry_timestamp=_epoch(rec.window_expires_at),
                in_progress_expiry_timestamp=int(until.timestamp() * 1000) if until is not None else None,
            )
        stored.payload_sha256 = rec.payload_sha256
        return stored
