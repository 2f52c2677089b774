from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

COMPONENT_RESET: RecommendedAction
CONTACT_SUPPORT: RecommendedAction
CUSTOM: RecommendedAction
DESCRIPTOR: _descriptor.FileDescriptor
EXECUTE_REMEDIATION: ProcessingStrategy
NONE: RecommendedAction
REPLACE_VM: RecommendedAction
RESTART_BM: RecommendedAction
RESTART_VM: RecommendedAction
RUN_DCGMEUD: RecommendedAction
RUN_FIELDDIAG: RecommendedAction
STORE_AND_ANALYSE: ProcessingStrategy
STORE_ONLY: ProcessingStrategy
UNKNOWN: RecommendedAction
UNSPECIFIED: ProcessingStrategy

class BehaviourOverrides(_message.Message):
    __slots__ = ["force", "skip"]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    SKIP_FIELD_NUMBER: _ClassVar[int]
    force: bool
    skip: bool
    def __init__(self, force: bool = ..., skip: bool = ...) -> None: ...

class Entity(_message.Message):
    __slots__ = ["entityType", "entityValue"]
    ENTITYTYPE_FIELD_NUMBER: _ClassVar[int]
    ENTITYVALUE_FIELD_NUMBER: _ClassVar[int]
    entityType: str
    entityValue: str
    def __init__(self, entityType: _Optional[str] = ..., entityValue: _Optional[str] = ...) -> None: ...

class HealthEvent(_message.Message):
    __slots__ = ["agent", "checkName", "componentClass", "customRecommendedAction", "drainOverrides", "entitiesImpacted", "errorCode", "generatedTimestamp", "id", "isFatal", "isHealthy", "message", "metadata", "nodeName", "processingStrategy", "quarantineOverrides", "recommendedAction", "version"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_FIELD_NUMBER: _ClassVar[int]
    CHECKNAME_FIELD_NUMBER: _ClassVar[int]
    COMPONENTCLASS_FIELD_NUMBER: _ClassVar[int]
    CUSTOMRECOMMENDEDACTION_FIELD_NUMBER: _ClassVar[int]
    DRAINOVERRIDES_FIELD_NUMBER: _ClassVar[int]
    ENTITIESIMPACTED_FIELD_NUMBER: _ClassVar[int]
    ERRORCODE_FIELD_NUMBER: _ClassVar[int]
    GENERATEDTIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ISFATAL_FIELD_NUMBER: _ClassVar[int]
    ISHEALTHY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    NODENAME_FIELD_NUMBER: _ClassVar[int]
    PROCESSINGSTRATEGY_FIELD_NUMBER: _ClassVar[int]
    QUARANTINEOVERRIDES_FIELD_NUMBER: _ClassVar[int]
    RECOMMENDEDACTION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    agent: str
    checkName: str
    componentClass: str
    customRecommendedAction: str
    drainOverrides: BehaviourOverrides
    entitiesImpacted: _containers.RepeatedCompositeFieldContainer[Entity]
    errorCode: _containers.RepeatedScalarFieldContainer[str]
    generatedTimestamp: _timestamp_pb2.Timestamp
    id: str
    isFatal: bool
    isHealthy: bool
    message: str
    metadata: _containers.ScalarMap[str, str]
    nodeName: str
    processingStrategy: ProcessingStrategy
    quarantineOverrides: BehaviourOverrides
    recommendedAction: RecommendedAction
    version: int
    def __init__(self, version: _Optional[int] = ..., agent: _Optional[str] = ..., componentClass: _Optional[str] = ..., checkName: _Optional[str] = ..., isFatal: bool = ..., isHealthy: bool = ..., message: _Optional[str] = ..., recommendedAction: _Optional[_Union[RecommendedAction, str]] = ..., errorCode: _Optional[_Iterable[str]] = ..., entitiesImpacted: _Optional[_Iterable[_Union[Entity, _Mapping]]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., generatedTimestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., nodeName: _Optional[str] = ..., quarantineOverrides: _Optional[_Union[BehaviourOverrides, _Mapping]] = ..., drainOverrides: _Optional[_Union[BehaviourOverrides, _Mapping]] = ..., processingStrategy: _Optional[_Union[ProcessingStrategy, str]] = ..., id: _Optional[str] = ..., customRecommendedAction: _Optional[str] = ...) -> None: ...

class HealthEvents(_message.Message):
    __slots__ = ["events", "version"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[HealthEvent]
    version: int
    def __init__(self, version: _Optional[int] = ..., events: _Optional[_Iterable[_Union[HealthEvent, _Mapping]]] = ...) -> None: ...

class RecommendedAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ProcessingStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
