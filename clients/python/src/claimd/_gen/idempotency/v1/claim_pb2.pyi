import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_ACQUIRED: _ClassVar[Outcome]
    OUTCOME_DUPLICATE: _ClassVar[Outcome]
    OUTCOME_IN_PROGRESS: _ClassVar[Outcome]
    OUTCOME_PAYLOAD_MISMATCH: _ClassVar[Outcome]
    OUTCOME_DEFERRED: _ClassVar[Outcome]
    OUTCOME_SUPERSEDED: _ClassVar[Outcome]

class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REASON_UNSPECIFIED: _ClassVar[Reason]
    REASON_NEW: _ClassVar[Reason]
    REASON_RELEASED: _ClassVar[Reason]
    REASON_LEASE_EXPIRED: _ClassVar[Reason]
    REASON_WINDOW_EXPIRED: _ClassVar[Reason]

class EventState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_STATE_UNSPECIFIED: _ClassVar[EventState]
    EVENT_STATE_RECEIVED: _ClassVar[EventState]
    EVENT_STATE_VALIDATED: _ClassVar[EventState]
    EVENT_STATE_PROCESSING: _ClassVar[EventState]
    EVENT_STATE_SETTLED: _ClassVar[EventState]
    EVENT_STATE_FAILED: _ClassVar[EventState]

class KeySource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KEY_SOURCE_UNSPECIFIED: _ClassVar[KeySource]
    KEY_SOURCE_EVENT_ID: _ClassVar[KeySource]
    KEY_SOURCE_HEADER: _ClassVar[KeySource]
    KEY_SOURCE_BODY_FIELD: _ClassVar[KeySource]
    KEY_SOURCE_BODY_HASH: _ClassVar[KeySource]

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    INVALID_ARGUMENT: _ClassVar[ErrorReason]
    PROVIDER_NOT_FOUND: _ClassVar[ErrorReason]
    RECORD_NOT_FOUND: _ClassVar[ErrorReason]
    INVALID_TRANSITION: _ClassVar[ErrorReason]
    STALE_TOKEN: _ClassVar[ErrorReason]
    RESULT_MISMATCH: _ClassVar[ErrorReason]
    NOT_OWNER: _ClassVar[ErrorReason]
    DURABLE_TIER_UNAVAILABLE: _ClassVar[ErrorReason]
    CREDENTIALS_MISSING: _ClassVar[ErrorReason]
    TOKEN_MALFORMED: _ClassVar[ErrorReason]
    TOKEN_UNKNOWN: _ClassVar[ErrorReason]
    IDENTITY_UNKNOWN: _ClassVar[ErrorReason]
    PRINCIPAL_CONFLICT: _ClassVar[ErrorReason]
    NAMESPACE_DENIED: _ClassVar[ErrorReason]
    ROLE_DENIED: _ClassVar[ErrorReason]
    METHOD_DENIED: _ClassVar[ErrorReason]
    RATE_LIMITED: _ClassVar[ErrorReason]
    ENTITY_NOT_FOUND: _ClassVar[ErrorReason]
    LIFECYCLE_NOT_FOUND: _ClassVar[ErrorReason]
    INTERNAL: _ClassVar[ErrorReason]
    REQUEST_TOO_LARGE: _ClassVar[ErrorReason]
    HOST_NOT_ALLOWED: _ClassVar[ErrorReason]
    ORIGIN_NOT_ALLOWED: _ClassVar[ErrorReason]
    CONTENT_TYPE_UNSUPPORTED: _ClassVar[ErrorReason]

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIER_UNSPECIFIED: _ClassVar[Tier]
    TIER_LOCAL: _ClassVar[Tier]
    TIER_FAST: _ClassVar[Tier]
    TIER_DURABLE: _ClassVar[Tier]

class AuditOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIT_OP_UNSPECIFIED: _ClassVar[AuditOp]
    AUDIT_OP_CLAIM: _ClassVar[AuditOp]
    AUDIT_OP_TRANSITION: _ClassVar[AuditOp]
    AUDIT_OP_RENEW: _ClassVar[AuditOp]
    AUDIT_OP_RELEASE: _ClassVar[AuditOp]
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_ACQUIRED: Outcome
OUTCOME_DUPLICATE: Outcome
OUTCOME_IN_PROGRESS: Outcome
OUTCOME_PAYLOAD_MISMATCH: Outcome
OUTCOME_DEFERRED: Outcome
OUTCOME_SUPERSEDED: Outcome
REASON_UNSPECIFIED: Reason
REASON_NEW: Reason
REASON_RELEASED: Reason
REASON_LEASE_EXPIRED: Reason
REASON_WINDOW_EXPIRED: Reason
EVENT_STATE_UNSPECIFIED: EventState
EVENT_STATE_RECEIVED: EventState
EVENT_STATE_VALIDATED: EventState
EVENT_STATE_PROCESSING: EventState
EVENT_STATE_SETTLED: EventState
EVENT_STATE_FAILED: EventState
KEY_SOURCE_UNSPECIFIED: KeySource
KEY_SOURCE_EVENT_ID: KeySource
KEY_SOURCE_HEADER: KeySource
KEY_SOURCE_BODY_FIELD: KeySource
KEY_SOURCE_BODY_HASH: KeySource
ERROR_REASON_UNSPECIFIED: ErrorReason
INVALID_ARGUMENT: ErrorReason
PROVIDER_NOT_FOUND: ErrorReason
RECORD_NOT_FOUND: ErrorReason
INVALID_TRANSITION: ErrorReason
STALE_TOKEN: ErrorReason
RESULT_MISMATCH: ErrorReason
NOT_OWNER: ErrorReason
DURABLE_TIER_UNAVAILABLE: ErrorReason
CREDENTIALS_MISSING: ErrorReason
TOKEN_MALFORMED: ErrorReason
TOKEN_UNKNOWN: ErrorReason
IDENTITY_UNKNOWN: ErrorReason
PRINCIPAL_CONFLICT: ErrorReason
NAMESPACE_DENIED: ErrorReason
ROLE_DENIED: ErrorReason
METHOD_DENIED: ErrorReason
RATE_LIMITED: ErrorReason
ENTITY_NOT_FOUND: ErrorReason
LIFECYCLE_NOT_FOUND: ErrorReason
INTERNAL: ErrorReason
REQUEST_TOO_LARGE: ErrorReason
HOST_NOT_ALLOWED: ErrorReason
ORIGIN_NOT_ALLOWED: ErrorReason
CONTENT_TYPE_UNSUPPORTED: ErrorReason
TIER_UNSPECIFIED: Tier
TIER_LOCAL: Tier
TIER_FAST: Tier
TIER_DURABLE: Tier
AUDIT_OP_UNSPECIFIED: AuditOp
AUDIT_OP_CLAIM: AuditOp
AUDIT_OP_TRANSITION: AuditOp
AUDIT_OP_RENEW: AuditOp
AUDIT_OP_RELEASE: AuditOp

class Delivery(_message.Message):
    __slots__ = ("headers", "body")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    headers: _containers.ScalarMap[str, str]
    body: bytes
    def __init__(self, headers: _Optional[_Mapping[str, str]] = ..., body: _Optional[bytes] = ...) -> None: ...

class ClaimRequest(_message.Message):
    __slots__ = ("namespace", "provider", "event_id", "delivery", "scope", "payload_sha256", "lease", "holder", "attempt_id", "wait", "entity_id", "event_type", "start", "window")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    provider: str
    event_id: str
    delivery: Delivery
    scope: str
    payload_sha256: bytes
    lease: _duration_pb2.Duration
    holder: str
    attempt_id: str
    wait: _duration_pb2.Duration
    entity_id: str
    event_type: str
    start: bool
    window: _duration_pb2.Duration
    def __init__(self, namespace: _Optional[str] = ..., provider: _Optional[str] = ..., event_id: _Optional[str] = ..., delivery: _Optional[_Union[Delivery, _Mapping]] = ..., scope: _Optional[str] = ..., payload_sha256: _Optional[bytes] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., holder: _Optional[str] = ..., attempt_id: _Optional[str] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., entity_id: _Optional[str] = ..., event_type: _Optional[str] = ..., start: _Optional[bool] = ..., window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ClaimResponse(_message.Message):
    __slots__ = ("outcome", "reason", "key", "key_source", "fencing_token", "state", "lease_expires_at", "window_expires_at", "ttl", "attempt", "first_seen_at", "result", "served_by", "holder", "lease_secret", "retry_after", "entity")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    KEY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    WINDOW_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_AT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SERVED_BY_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECRET_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    outcome: Outcome
    reason: Reason
    key: str
    key_source: KeySource
    fencing_token: int
    state: EventState
    lease_expires_at: _timestamp_pb2.Timestamp
    window_expires_at: _timestamp_pb2.Timestamp
    ttl: _duration_pb2.Duration
    attempt: int
    first_seen_at: _timestamp_pb2.Timestamp
    result: bytes
    served_by: Tier
    holder: str
    lease_secret: bytes
    retry_after: _duration_pb2.Duration
    entity: EntityPosition
    def __init__(self, outcome: _Optional[_Union[Outcome, str]] = ..., reason: _Optional[_Union[Reason, str]] = ..., key: _Optional[str] = ..., key_source: _Optional[_Union[KeySource, str]] = ..., fencing_token: _Optional[int] = ..., state: _Optional[_Union[EventState, str]] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., window_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., attempt: _Optional[int] = ..., first_seen_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., result: _Optional[bytes] = ..., served_by: _Optional[_Union[Tier, str]] = ..., holder: _Optional[str] = ..., lease_secret: _Optional[bytes] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., entity: _Optional[_Union[EntityPosition, _Mapping]] = ...) -> None: ...

class EntityPosition(_message.Message):
    __slots__ = ("lifecycle", "entity_id", "event_type", "state", "awaiting", "leads_to", "busy_with", "deferrals")
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    AWAITING_FIELD_NUMBER: _ClassVar[int]
    LEADS_TO_FIELD_NUMBER: _ClassVar[int]
    BUSY_WITH_FIELD_NUMBER: _ClassVar[int]
    DEFERRALS_FIELD_NUMBER: _ClassVar[int]
    lifecycle: str
    entity_id: str
    event_type: str
    state: str
    awaiting: _containers.RepeatedScalarFieldContainer[str]
    leads_to: str
    busy_with: str
    deferrals: int
    def __init__(self, lifecycle: _Optional[str] = ..., entity_id: _Optional[str] = ..., event_type: _Optional[str] = ..., state: _Optional[str] = ..., awaiting: _Optional[_Iterable[str]] = ..., leads_to: _Optional[str] = ..., busy_with: _Optional[str] = ..., deferrals: _Optional[int] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("namespace", "provider", "key", "state", "fencing_token", "holder", "attempt", "released", "first_seen_at", "lease_expires_at", "window_expires_at", "updated_at", "payload_sha256", "result", "lifecycle", "entity_id", "event_type")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    WINDOW_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    provider: str
    key: str
    state: EventState
    fencing_token: int
    holder: str
    attempt: int
    released: bool
    first_seen_at: _timestamp_pb2.Timestamp
    lease_expires_at: _timestamp_pb2.Timestamp
    window_expires_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    payload_sha256: bytes
    result: bytes
    lifecycle: str
    entity_id: str
    event_type: str
    def __init__(self, namespace: _Optional[str] = ..., provider: _Optional[str] = ..., key: _Optional[str] = ..., state: _Optional[_Union[EventState, str]] = ..., fencing_token: _Optional[int] = ..., holder: _Optional[str] = ..., attempt: _Optional[int] = ..., released: _Optional[bool] = ..., first_seen_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., window_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., payload_sha256: _Optional[bytes] = ..., result: _Optional[bytes] = ..., lifecycle: _Optional[str] = ..., entity_id: _Optional[str] = ..., event_type: _Optional[str] = ...) -> None: ...

class TransitionRequest(_message.Message):
    __slots__ = ("namespace", "provider", "key", "fencing_token", "to", "result", "extend_lease", "lease_secret", "effect_recovered")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    EXTEND_LEASE_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECRET_FIELD_NUMBER: _ClassVar[int]
    EFFECT_RECOVERED_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    provider: str
    key: str
    fencing_token: int
    to: EventState
    result: bytes
    extend_lease: _duration_pb2.Duration
    lease_secret: bytes
    effect_recovered: bool
    def __init__(self, namespace: _Optional[str] = ..., provider: _Optional[str] = ..., key: _Optional[str] = ..., fencing_token: _Optional[int] = ..., to: _Optional[_Union[EventState, str]] = ..., result: _Optional[bytes] = ..., extend_lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_secret: _Optional[bytes] = ..., effect_recovered: _Optional[bool] = ...) -> None: ...

class TransitionResponse(_message.Message):
    __slots__ = ("record", "changed")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    record: Record
    changed: bool
    def __init__(self, record: _Optional[_Union[Record, _Mapping]] = ..., changed: _Optional[bool] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("namespace", "provider", "key", "fencing_token", "lease", "lease_secret")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECRET_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    provider: str
    key: str
    fencing_token: int
    lease: _duration_pb2.Duration
    lease_secret: bytes
    def __init__(self, namespace: _Optional[str] = ..., provider: _Optional[str] = ..., key: _Optional[str] = ..., fencing_token: _Optional[int] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_secret: _Optional[bytes] = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: Record
    def __init__(self, record: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("namespace", "provider", "key", "fencing_token", "lease_secret")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECRET_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    provider: str
    key: str
    fencing_token: int
    lease_secret: bytes
    def __init__(self, namespace: _Optional[str] = ..., provider: _Optional[str] = ..., key: _Optional[str] = ..., fencing_token: _Optional[int] = ..., lease_secret: _Optional[bytes] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: Record
    def __init__(self, record: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("namespace", "provider", "key")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    provider: str
    key: str
    def __init__(self, namespace: _Optional[str] = ..., provider: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("record", "next")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    record: Record
    next: NextAnswer
    def __init__(self, record: _Optional[_Union[Record, _Mapping]] = ..., next: _Optional[_Union[NextAnswer, _Mapping]] = ...) -> None: ...

class NextAnswer(_message.Message):
    __slots__ = ("outcome", "reason", "until", "explanation")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    outcome: Outcome
    reason: Reason
    until: _timestamp_pb2.Timestamp
    explanation: str
    def __init__(self, outcome: _Optional[_Union[Outcome, str]] = ..., reason: _Optional[_Union[Reason, str]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., explanation: _Optional[str] = ...) -> None: ...

class ListClaimsRequest(_message.Message):
    __slots__ = ("namespace", "provider", "keys", "states", "entity_id", "first_seen_after", "first_seen_before", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_AFTER_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_BEFORE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    provider: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    states: _containers.RepeatedScalarFieldContainer[EventState]
    entity_id: str
    first_seen_after: _timestamp_pb2.Timestamp
    first_seen_before: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., provider: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., states: _Optional[_Iterable[_Union[EventState, str]]] = ..., entity_id: _Optional[str] = ..., first_seen_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., first_seen_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListClaimsResponse(_message.Message):
    __slots__ = ("records", "next_page_token")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    next_page_token: str
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListAuditRequest(_message.Message):
    __slots__ = ("namespace", "provider", "key", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    provider: str
    key: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., provider: _Optional[str] = ..., key: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("at", "op", "outcome", "reason", "state", "fencing_token", "holder", "principal", "transport", "effect_recovered", "payload_sha256")
    AT_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    EFFECT_RECOVERED_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    op: AuditOp
    outcome: Outcome
    reason: Reason
    state: EventState
    fencing_token: int
    holder: str
    principal: str
    transport: str
    effect_recovered: bool
    payload_sha256: bytes
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., op: _Optional[_Union[AuditOp, str]] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., reason: _Optional[_Union[Reason, str]] = ..., state: _Optional[_Union[EventState, str]] = ..., fencing_token: _Optional[int] = ..., holder: _Optional[str] = ..., principal: _Optional[str] = ..., transport: _Optional[str] = ..., effect_recovered: _Optional[bool] = ..., payload_sha256: _Optional[bytes] = ...) -> None: ...

class ListAuditResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
