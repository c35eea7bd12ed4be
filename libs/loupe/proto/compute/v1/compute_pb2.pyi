from loupe.proto.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ComputeCommand(_message.Message):
    __slots__ = ("incarnation", "create_instance", "initialization_complete", "peek", "cancel_peek", "update_configuration", "allow_compaction")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    CREATE_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    INITIALIZATION_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    PEEK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_PEEK_FIELD_NUMBER: _ClassVar[int]
    UPDATE_CONFIGURATION_FIELD_NUMBER: _ClassVar[int]
    ALLOW_COMPACTION_FIELD_NUMBER: _ClassVar[int]
    incarnation: int
    create_instance: CreateInstance
    initialization_complete: InitializationComplete
    peek: Peek
    cancel_peek: CancelPeek
    update_configuration: UpdateConfiguration
    allow_compaction: AllowCompaction
    def __init__(self, incarnation: _Optional[int] = ..., create_instance: _Optional[_Union[CreateInstance, _Mapping]] = ..., initialization_complete: _Optional[_Union[InitializationComplete, _Mapping]] = ..., peek: _Optional[_Union[Peek, _Mapping]] = ..., cancel_peek: _Optional[_Union[CancelPeek, _Mapping]] = ..., update_configuration: _Optional[_Union[UpdateConfiguration, _Mapping]] = ..., allow_compaction: _Optional[_Union[AllowCompaction, _Mapping]] = ...) -> None: ...

class LoggingConfig(_message.Message):
    __slots__ = ("interval_ns", "enable_logging", "log_logging", "index_logs", "sink_logs")
    class IndexLogsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SinkLogsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.CollectionMetadata
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.CollectionMetadata, _Mapping]] = ...) -> None: ...
    INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_LOGGING_FIELD_NUMBER: _ClassVar[int]
    LOG_LOGGING_FIELD_NUMBER: _ClassVar[int]
    INDEX_LOGS_FIELD_NUMBER: _ClassVar[int]
    SINK_LOGS_FIELD_NUMBER: _ClassVar[int]
    interval_ns: int
    enable_logging: bool
    log_logging: bool
    index_logs: _containers.ScalarMap[str, str]
    sink_logs: _containers.MessageMap[str, _common_pb2.CollectionMetadata]
    def __init__(self, interval_ns: _Optional[int] = ..., enable_logging: _Optional[bool] = ..., log_logging: _Optional[bool] = ..., index_logs: _Optional[_Mapping[str, str]] = ..., sink_logs: _Optional[_Mapping[str, _common_pb2.CollectionMetadata]] = ...) -> None: ...

class CreateInstance(_message.Message):
    __slots__ = ("replica_id", "cluster_id", "incarnation", "workers", "logging", "blob_uri", "consensus_uri")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    LOGGING_FIELD_NUMBER: _ClassVar[int]
    BLOB_URI_FIELD_NUMBER: _ClassVar[int]
    CONSENSUS_URI_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    cluster_id: str
    incarnation: int
    workers: int
    logging: LoggingConfig
    blob_uri: str
    consensus_uri: str
    def __init__(self, replica_id: _Optional[str] = ..., cluster_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., workers: _Optional[int] = ..., logging: _Optional[_Union[LoggingConfig, _Mapping]] = ..., blob_uri: _Optional[str] = ..., consensus_uri: _Optional[str] = ...) -> None: ...

class InitializationComplete(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PeekSource(_message.Message):
    __slots__ = ("name", "collection")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    collection: _common_pb2.CollectionMetadata
    def __init__(self, name: _Optional[str] = ..., collection: _Optional[_Union[_common_pb2.CollectionMetadata, _Mapping]] = ...) -> None: ...

class Peek(_message.Message):
    __slots__ = ("uuid", "timestamp", "sources", "sql", "max_result_rows")
    UUID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    SQL_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULT_ROWS_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    timestamp: int
    sources: _containers.RepeatedCompositeFieldContainer[PeekSource]
    sql: str
    max_result_rows: int
    def __init__(self, uuid: _Optional[str] = ..., timestamp: _Optional[int] = ..., sources: _Optional[_Iterable[_Union[PeekSource, _Mapping]]] = ..., sql: _Optional[str] = ..., max_result_rows: _Optional[int] = ...) -> None: ...

class CancelPeek(_message.Message):
    __slots__ = ("uuid",)
    UUID_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    def __init__(self, uuid: _Optional[str] = ...) -> None: ...

class UpdateConfiguration(_message.Message):
    __slots__ = ("parameters",)
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    parameters: _containers.ScalarMap[str, str]
    def __init__(self, parameters: _Optional[_Mapping[str, str]] = ...) -> None: ...

class AllowCompaction(_message.Message):
    __slots__ = ("collection_id", "since")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    since: int
    def __init__(self, collection_id: _Optional[str] = ..., since: _Optional[int] = ...) -> None: ...

class ComputeResponse(_message.Message):
    __slots__ = ("replica_id", "incarnation", "hello", "heartbeat", "peek_response", "frontiers", "status")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    PEEK_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    FRONTIERS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    incarnation: int
    hello: Hello
    heartbeat: Heartbeat
    peek_response: PeekResponse
    frontiers: Frontiers
    status: Status
    def __init__(self, replica_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., hello: _Optional[_Union[Hello, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., peek_response: _Optional[_Union[PeekResponse, _Mapping]] = ..., frontiers: _Optional[_Union[Frontiers, _Mapping]] = ..., status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("pid", "hostname")
    PID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    pid: int
    hostname: str
    def __init__(self, pid: _Optional[int] = ..., hostname: _Optional[str] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("process_id", "cpu_nano_cores", "memory_bytes", "disk_bytes", "workers", "initialized", "sent_at_ms")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    CPU_NANO_CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    process_id: int
    cpu_nano_cores: int
    memory_bytes: int
    disk_bytes: int
    workers: int
    initialized: bool
    sent_at_ms: int
    def __init__(self, process_id: _Optional[int] = ..., cpu_nano_cores: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., disk_bytes: _Optional[int] = ..., workers: _Optional[int] = ..., initialized: _Optional[bool] = ..., sent_at_ms: _Optional[int] = ...) -> None: ...

class PeekResponse(_message.Message):
    __slots__ = ("uuid", "rows", "error", "canceled")
    UUID_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    rows: PeekRows
    error: _common_pb2.Error
    canceled: bool
    def __init__(self, uuid: _Optional[str] = ..., rows: _Optional[_Union[PeekRows, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., canceled: _Optional[bool] = ...) -> None: ...

class PeekRows(_message.Message):
    __slots__ = ("desc", "rows")
    DESC_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    desc: _common_pb2.RelationDesc
    rows: _containers.RepeatedCompositeFieldContainer[_common_pb2.Row]
    def __init__(self, desc: _Optional[_Union[_common_pb2.RelationDesc, _Mapping]] = ..., rows: _Optional[_Iterable[_Union[_common_pb2.Row, _Mapping]]] = ...) -> None: ...

class Frontiers(_message.Message):
    __slots__ = ("collection_id", "write_frontier")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    WRITE_FRONTIER_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    write_frontier: int
    def __init__(self, collection_id: _Optional[str] = ..., write_frontier: _Optional[int] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...
