"""The values the client hands back: enums mirroring idempotency.v1 and small
frozen dataclasses, so callers never touch generated protobuf classes."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TypeVar, cast

from google.protobuf import duration_pb2, timestamp_pb2

from claimd._gen.idempotency.v1 import claim_pb2 as pb
from claimd._gen.idempotency.v1 import provider_pb2 as provider_pb

Seconds = float | timedelta
"""Seconds is a duration: a number of seconds or a timedelta."""

# Bounds of the API (DESIGN §2) that the client checks or relies on.
MAX_RESULT_BYTES = 64 << 10
"""MAX_RESULT_BYTES is the most a settled or failed record stores as result."""


class _Named(enum.IntEnum):
    """_Named is an IntEnum that prints as its name: str() and f-strings give
    ACQUIRED, not 1 (IntEnum's own since Python 3.11), so logs and messages
    read as the proto's names. It still compares and converts as an int."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)


class Outcome(_Named):
    """Outcome is the answer of a Claim (idempotency.v1.Outcome)."""

    UNSPECIFIED = 0
    ACQUIRED = 1
    DUPLICATE = 2
    IN_PROGRESS = 3
    PAYLOAD_MISMATCH = 4
    DEFERRED = 5
    SUPERSEDED = 6


class Reason(_Named):
    """Reason says why a Claim was ACQUIRED (idempotency.v1.Reason)."""

    UNSPECIFIED = 0
    NEW = 1
    RELEASED = 2
    LEASE_EXPIRED = 3
    WINDOW_EXPIRED = 4


class EventState(_Named):
    """EventState is the per-event state (idempotency.v1.EventState)."""

    UNSPECIFIED = 0
    RECEIVED = 1
    VALIDATED = 2
    PROCESSING = 3
    SETTLED = 4
    FAILED = 5

    @property
    def terminal(self) -> bool:
        """terminal is true for SETTLED and FAILED, which never change."""
        return self in (EventState.SETTLED, EventState.FAILED)


class KeySource(_Named):
    """KeySource tells where the canonical key came from."""

    UNSPECIFIED = 0
    EVENT_ID = 1
    HEADER = 2
    BODY_FIELD = 3
    BODY_HASH = 4


class Tier(_Named):
    """Tier names the store that decided an answer."""

    UNSPECIFIED = 0
    LOCAL = 1
    FAST = 2
    DURABLE = 3


# The proto enum each Python enum mirrors, with its value-name prefix; a test
# holds the two to the same names and numbers.
PROTO_ENUMS: Mapping[type[enum.IntEnum], tuple[str, str]] = {
    Outcome: ("Outcome", "OUTCOME_"),
    Reason: ("Reason", "REASON_"),
    EventState: ("EventState", "EVENT_STATE_"),
    KeySource: ("KeySource", "KEY_SOURCE_"),
    Tier: ("Tier", "TIER_"),
}

E = TypeVar("E", bound=enum.IntEnum)


_MEMBERS: dict[type[enum.IntEnum], dict[int, enum.IntEnum]] = {}


def _enum(cls: type[E], value: int) -> E:
    # A value added to the proto after this client was built reads as
    # UNSPECIFIED instead of failing the whole response. A dict of the
    # members: calling the enum class costs several times as much, five
    # times per answer.
    members = _MEMBERS.get(cls)
    if members is None:
        members = _MEMBERS[cls] = {m.value: m for m in cls}
    member = members.get(value)
    return cast(E, member if member is not None else members[0])


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# Timestamp's range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
_MIN_SECONDS, _MAX_SECONDS = -62135596800, 253402300799


def _time(ts: timestamp_pb2.Timestamp, present: bool) -> datetime | None:
    if not present:
        return None
    seconds, nanos = ts.seconds, ts.nanos
    if _MIN_SECONDS <= seconds <= _MAX_SECONDS and 0 <= nanos < 1_000_000_000:
        # Timestamp.ToDatetime(tzinfo=timezone.utc)'s arithmetic, without
        # its checks (made here) and its conversion from UTC to UTC: a third
        # of its cost, seven times per first delivery.
        return _EPOCH + timedelta(seconds=seconds, microseconds=nanos // 1000)
    return ts.ToDatetime(tzinfo=timezone.utc)  # raises ValueError: what is out of range


def _duration(d: duration_pb2.Duration, present: bool) -> timedelta | None:
    return d.ToTimedelta() if present else None


@dataclass(frozen=True)
class Delivery:
    """Delivery is a raw webhook delivery: the server derives the key from it
    by the provider's key rule (e.g. Stripe's body field "id"), and hashes the
    body to detect a different payload under the same key."""

    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class EventRef:
    """EventRef names an event sent by its id and, for an entity lifecycle,
    its entity and event type (both or neither): claimd then orders the event
    against its entity (DEFERRED while it came too early, SUPERSEDED once the
    entity is past it). The guarded decorator takes it where it takes an
    event id; a Delivery's entity and event type are read from it by the
    provider's rules instead."""

    event_id: str
    entity_id: str = ""
    event_type: str = ""


@dataclass(frozen=True)
class EntityPosition:
    """EntityPosition is an event's place in its entity's lifecycle, as a
    Claim decided it (idempotency.v1.EntityPosition): the entity's state
    then, the states a DEFERRED event waits for (awaiting), the state the
    event leads to, the event type another event of the entity is being
    processed for (busy_with), and how often this event was deferred."""

    lifecycle: str
    entity_id: str
    event_type: str
    state: str
    awaiting: tuple[str, ...] = ()
    leads_to: str = ""
    busy_with: str = ""
    deferrals: int = 0

    @classmethod
    def from_pb(cls, m: pb.EntityPosition) -> EntityPosition:
        """from_pb converts an EntityPosition."""
        return cls(
            lifecycle=m.lifecycle,
            entity_id=m.entity_id,
            event_type=m.event_type,
            state=m.state,
            awaiting=tuple(m.awaiting),
            leads_to=m.leads_to,
            busy_with=m.busy_with,
            deferrals=m.deferrals,
        )


@dataclass(frozen=True)
class Lease:
    """Lease is the owner's handle on a claimed record: what Client.transition,
    renew and release present. fencing_token is a sequence number anyone may
    read (get shows it); lease_secret, which only the ACQUIRED answer carried,
    is what proves ownership, so keep a Lease as private as a password while
    the claim runs (its repr leaves the secret out). Take it from
    Claim.lease, or pass the Claim itself."""

    namespace: str
    provider: str
    key: str
    fencing_token: int
    lease_secret: bytes = field(repr=False)


@dataclass(frozen=True)
class Claim:
    """Claim is the decision on a delivery (ClaimResponse), with the namespace
    and provider it was asked for so follow-up calls need only this value.
    An ACQUIRED claim also carries the lease secret (left out of its repr):
    pass the Claim, or its lease, to transition, renew and release."""

    namespace: str
    provider: str
    outcome: Outcome
    reason: Reason
    key: str
    key_source: KeySource
    fencing_token: int
    state: EventState
    lease_expires_at: datetime | None
    window_expires_at: datetime | None
    ttl: timedelta | None
    attempt: int
    first_seen_at: datetime | None
    result: bytes
    served_by: Tier
    holder: str
    attempt_id: str = ""
    lease_secret: bytes = field(default=b"", repr=False)
    retry_after: timedelta | None = None
    """retry_after is set for DEFERRED: how long the provider should wait
    before redelivering."""
    entity: EntityPosition | None = None
    """entity is set when the event belongs to an entity lifecycle."""
    cached: bool = False
    """cached is true for a DUPLICATE answered from the client's own
    duplicate cache (Client(local_cache=N)): claimd was not asked."""

    @property
    def acquired(self) -> bool:
        """acquired is true when the caller owns the delivery and must act."""
        return self.outcome == Outcome.ACQUIRED

    @property
    def lease(self) -> Lease:
        """lease is the owner's handle on the record. It raises ValueError
        unless the claim was ACQUIRED: no other answer owns anything."""
        if not self.acquired or not self.lease_secret:
            raise ValueError(f"Claim.lease: the claim of {self.key!r} was {self.outcome.name}, not ACQUIRED")
        return Lease(self.namespace, self.provider, self.key, self.fencing_token, self.lease_secret)

    @classmethod
    def from_pb(cls, namespace: str, provider: str, attempt_id: str, m: pb.ClaimResponse) -> Claim:
        """from_pb converts a ClaimResponse."""
        return cls(
            namespace=namespace,
            provider=provider,
            outcome=_enum(Outcome, m.outcome),
            reason=_enum(Reason, m.reason),
            key=m.key,
            key_source=_enum(KeySource, m.key_source),
            fencing_token=m.fencing_token,
            state=_enum(EventState, m.state),
            lease_expires_at=_time(m.lease_expires_at, m.HasField("lease_expires_at")),
            window_expires_at=_time(m.window_expires_at, m.HasField("window_expires_at")),
            ttl=_duration(m.ttl, m.HasField("ttl")),
            attempt=m.attempt,
            first_seen_at=_time(m.first_seen_at, m.HasField("first_seen_at")),
            result=m.result,
            served_by=_enum(Tier, m.served_by),
            holder=m.holder,
            attempt_id=attempt_id,
            lease_secret=m.lease_secret,
            retry_after=_duration(m.retry_after, m.HasField("retry_after")),
            entity=EntityPosition.from_pb(m.entity) if m.HasField("entity") else None,
        )


@dataclass(frozen=True)
class Record:
    """Record is the stored state of one (namespace, provider, key)."""

    namespace: str
    provider: str
    key: str
    state: EventState
    fencing_token: int
    holder: str
    attempt: int
    released: bool
    first_seen_at: datetime | None
    lease_expires_at: datetime | None
    window_expires_at: datetime | None
    updated_at: datetime | None
    payload_sha256: bytes = field(repr=False)
    result: bytes

    @classmethod
    def from_pb(cls, m: pb.Record) -> Record:
        """from_pb converts a Record message."""
        return cls(
            namespace=m.namespace,
            provider=m.provider,
            key=m.key,
            state=_enum(EventState, m.state),
            fencing_token=m.fencing_token,
            holder=m.holder,
            attempt=m.attempt,
            released=m.released,
            first_seen_at=_time(m.first_seen_at, m.HasField("first_seen_at")),
            lease_expires_at=_time(m.lease_expires_at, m.HasField("lease_expires_at")),
            window_expires_at=_time(m.window_expires_at, m.HasField("window_expires_at")),
            updated_at=_time(m.updated_at, m.HasField("updated_at")),
            payload_sha256=m.payload_sha256,
            result=m.result,
        )

    @property
    def lease(self) -> timedelta | None:
        """lease is the lease length granted at the last change, measured on
        the server's clock (updated_at to lease_expires_at), so a heartbeat can
        pace itself without trusting the local clock."""
        if self.lease_expires_at is None or self.updated_at is None:
            return None
        return self.lease_expires_at - self.updated_at


@dataclass(frozen=True)
class Transitioned:
    """Transitioned is the answer of a Transition: the record after it, and
    whether it changed anything (False for a repeat that already happened)."""

    record: Record
    changed: bool


@dataclass(frozen=True)
class Provider:
    """Provider is a webhook sender claimd knows (or a group of them, with
    members): how long it retries, the window, TTL and leases claimd derives
    from that, and the rule that keys its deliveries."""

    name: str
    retry_horizon: timedelta | None
    margin: timedelta | None
    ttl: timedelta | None
    lease: timedelta | None
    max_lease: timedelta | None
    key_rule: str
    source: str
    reviewed_on: str
    review_overdue: bool
    members: tuple[str, ...]

    @classmethod
    def from_pb(cls, m: provider_pb.Provider) -> Provider:
        """from_pb converts a Provider message."""
        return cls(
            name=m.name,
            retry_horizon=_duration(m.retry_horizon, m.HasField("retry_horizon")),
            margin=_duration(m.margin, m.HasField("margin")),
            ttl=_duration(m.ttl, m.HasField("ttl")),
            lease=_duration(m.lease, m.HasField("lease")),
            max_lease=_duration(m.max_lease, m.HasField("max_lease")),
            key_rule=m.key_rule,
            source=m.source,
            reviewed_on=m.reviewed_on,
            review_overdue=m.review_overdue,
            members=tuple(m.members),
        )
