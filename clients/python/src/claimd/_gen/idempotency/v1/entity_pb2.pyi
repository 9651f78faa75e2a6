import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListDeferredRequest(_message.Message):
    __slots__ = ("namespace", "provider", "entity_id", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    provider: str
    entity_id: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., provider: _Optional[str] = ..., entity_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class DeferredEvent(_message.Message):
    __slots__ = ("lifecycle", "entity_id", "event_type", "key", "superseded", "count", "first_seen_at", "last_seen_at", "entity_state", "awaiting", "ready", "applied", "lost", "horizon_ends_at")
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_AT_FIELD_NUMBER: _ClassVar[int]
    ENTITY_STATE_FIELD_NUMBER: _ClassVar[int]
    AWAITING_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    HORIZON_ENDS_AT_FIELD_NUMBER: _ClassVar[int]
    lifecycle: str
    entity_id: str
    event_type: str
    key: str
    superseded: bool
    count: int
    first_seen_at: _timestamp_pb2.Timestamp
    last_seen_at: _timestamp_pb2.Timestamp
    entity_state: str
    awaiting: _containers.RepeatedScalarFieldContainer[str]
    ready: bool
    applied: bool
    lost: bool
    horizon_ends_at: _timestamp_pb2.Timestamp
    def __init__(self, lifecycle: _Optional[str] = ..., entity_id: _Optional[str] = ..., event_type: _Optional[str] = ..., key: _Optional[str] = ..., superseded: _Optional[bool] = ..., count: _Optional[int] = ..., first_seen_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_seen_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., entity_state: _Optional[str] = ..., awaiting: _Optional[_Iterable[str]] = ..., ready: _Optional[bool] = ..., applied: _Optional[bool] = ..., lost: _Optional[bool] = ..., horizon_ends_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListDeferredResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[DeferredEvent]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[DeferredEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetEntityRequest(_message.Message):
    __slots__ = ("namespace", "provider", "lifecycle", "entity_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    provider: str
    lifecycle: str
    entity_id: str
    def __init__(self, namespace: _Optional[str] = ..., provider: _Optional[str] = ..., lifecycle: _Optional[str] = ..., entity_id: _Optional[str] = ...) -> None: ...

class AppliedEvent(_message.Message):
    __slots__ = ("event_type", "key", "from_state", "to_state", "fencing_token", "applied_at")
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    APPLIED_AT_FIELD_NUMBER: _ClassVar[int]
    event_type: str
    key: str
    from_state: str
    to_state: str
    fencing_token: int
    applied_at: _timestamp_pb2.Timestamp
    def __init__(self, event_type: _Optional[str] = ..., key: _Optional[str] = ..., from_state: _Optional[str] = ..., to_state: _Optional[str] = ..., fencing_token: _Optional[int] = ..., applied_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Entity(_message.Message):
    __slots__ = ("namespace", "provider", "lifecycle", "entity_id", "state", "version", "updated_at", "busy_with", "applied")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    BUSY_WITH_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    provider: str
    lifecycle: str
    entity_id: str
    state: str
    version: int
    updated_at: _timestamp_pb2.Timestamp
    busy_with: str
    applied: _containers.RepeatedCompositeFieldContainer[AppliedEvent]
    def __init__(self, namespace: _Optional[str] = ..., provider: _Optional[str] = ..., lifecycle: _Optional[str] = ..., entity_id: _Optional[str] = ..., state: _Optional[str] = ..., version: _Optional[int] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., busy_with: _Optional[str] = ..., applied: _Optional[_Iterable[_Union[AppliedEvent, _Mapping]]] = ...) -> None: ...

class GetEntityResponse(_message.Message):
    __slots__ = ("entity",)
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    entity: Entity
    def __init__(self, entity: _Optional[_Union[Entity, _Mapping]] = ...) -> None: ...
