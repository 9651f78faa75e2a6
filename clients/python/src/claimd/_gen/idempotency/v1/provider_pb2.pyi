import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Provider(_message.Message):
    __slots__ = ("name", "retry_horizon", "margin", "ttl", "lease", "max_lease", "key_rule", "source", "reviewed_on", "review_overdue", "members", "lifecycles")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RETRY_HORIZON_FIELD_NUMBER: _ClassVar[int]
    MARGIN_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASE_FIELD_NUMBER: _ClassVar[int]
    KEY_RULE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    REVIEWED_ON_FIELD_NUMBER: _ClassVar[int]
    REVIEW_OVERDUE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLES_FIELD_NUMBER: _ClassVar[int]
    name: str
    retry_horizon: _duration_pb2.Duration
    margin: _duration_pb2.Duration
    ttl: _duration_pb2.Duration
    lease: _duration_pb2.Duration
    max_lease: _duration_pb2.Duration
    key_rule: str
    source: str
    reviewed_on: str
    review_overdue: bool
    members: _containers.RepeatedScalarFieldContainer[str]
    lifecycles: _containers.RepeatedCompositeFieldContainer[Lifecycle]
    def __init__(self, name: _Optional[str] = ..., retry_horizon: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., margin: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., key_rule: _Optional[str] = ..., source: _Optional[str] = ..., reviewed_on: _Optional[str] = ..., review_overdue: _Optional[bool] = ..., members: _Optional[_Iterable[str]] = ..., lifecycles: _Optional[_Iterable[_Union[Lifecycle, _Mapping]]] = ...) -> None: ...

class Lifecycle(_message.Message):
    __slots__ = ("name", "entity_rule", "event_type_rule", "states", "events", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTITY_RULE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_RULE_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    entity_rule: str
    event_type_rule: str
    states: _containers.RepeatedScalarFieldContainer[str]
    events: _containers.RepeatedCompositeFieldContainer[LifecycleEvent]
    source: str
    def __init__(self, name: _Optional[str] = ..., entity_rule: _Optional[str] = ..., event_type_rule: _Optional[str] = ..., states: _Optional[_Iterable[str]] = ..., events: _Optional[_Iterable[_Union[LifecycleEvent, _Mapping]]] = ..., source: _Optional[str] = ...) -> None: ...

class LifecycleEvent(_message.Message):
    __slots__ = ("event_type", "from_states", "to_state", "entity_rule")
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    FROM_STATES_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_RULE_FIELD_NUMBER: _ClassVar[int]
    event_type: str
    from_states: _containers.RepeatedScalarFieldContainer[str]
    to_state: str
    entity_rule: str
    def __init__(self, event_type: _Optional[str] = ..., from_states: _Optional[_Iterable[str]] = ..., to_state: _Optional[str] = ..., entity_rule: _Optional[str] = ...) -> None: ...

class ListProvidersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListProvidersResponse(_message.Message):
    __slots__ = ("providers",)
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    providers: _containers.RepeatedCompositeFieldContainer[Provider]
    def __init__(self, providers: _Optional[_Iterable[_Union[Provider, _Mapping]]] = ...) -> None: ...

class GetProviderRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetProviderResponse(_message.Message):
    __slots__ = ("provider",)
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    provider: Provider
    def __init__(self, provider: _Optional[_Union[Provider, _Mapping]] = ...) -> None: ...
