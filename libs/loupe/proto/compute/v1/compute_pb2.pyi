from loupe.proto.common.v1 import common_pb2 as _common_pb2
from loupe.proto.compute.v1 import plan_pb2 as _plan_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ComputeCommand(_message.Message):
    __slots__ = ("incarnation", "create_instance", "initialization_complete", "peek", "cancel_peek", "update_configuration", "allow_compaction", "create_dataflow", "schedule")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    CREATE_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    INITIALIZATION_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    PEEK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_PEEK_FIELD_NUMBER: _ClassVar[int]
    UPDATE_CONFIGURATION_FIELD_NUMBER: _ClassVar[int]
    ALLOW_COMPACTION_FIELD_NUMBER: _ClassVar[int]
    CREATE_DATAFLOW_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    incarnation: int
    create_instance: CreateInstance
    initialization_complete: InitializationComplete
    peek: Peek
    cancel_peek: CancelPeek
    update_configuration: UpdateConfiguration
    allow_compaction: AllowCompaction
    create_dataflow: CreateDataflow
    schedule: Schedule
    def __init__(self, incarnation: _Optional[int] = ..., create_instance: _Optional[_Union[CreateInstance, _Mapping]] = ..., initialization_complete: _Optional[_Union[InitializationComplete, _Mapping]] = ..., peek: _Optional[_Union[Peek, _Mapping]] = ..., cancel_peek: _Optional[_Union[CancelPeek, _Mapping]] = ..., update_configuration: _Optional[_Union[UpdateConfiguration, _Mapping]] = ..., allow_compaction: _Optional[_Union[AllowCompaction, _Mapping]] = ..., create_dataflow: _Optional[_Union[CreateDataflow, _Mapping]] = ..., schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("replica_id", "cluster_id", "incarnation", "workers", "logging", "blob_uri", "consensus_uri", "memory_limit_bytes")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    LOGGING_FIELD_NUMBER: _ClassVar[int]
    BLOB_URI_FIELD_NUMBER: _ClassVar[int]
    CONSENSUS_URI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    cluster_id: str
    incarnation: int
    workers: int
    logging: LoggingConfig
    blob_uri: str
    consensus_uri: str
    memory_limit_bytes: int
    def __init__(self, replica_id: _Optional[str] = ..., cluster_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., workers: _Optional[int] = ..., logging: _Optional[_Union[LoggingConfig, _Mapping]] = ..., blob_uri: _Optional[str] = ..., consensus_uri: _Optional[str] = ..., memory_limit_bytes: _Optional[int] = ...) -> None: ...

class InitializationComplete(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CreateDataflow(_message.Message):
    __slots__ = ("dataflow",)
    DATAFLOW_FIELD_NUMBER: _ClassVar[int]
    dataflow: _plan_pb2.DataflowDescription
    def __init__(self, dataflow: _Optional[_Union[_plan_pb2.DataflowDescription, _Mapping]] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class RowSetFinishing(_message.Message):
    __slots__ = ("order", "limit", "offset", "project")
    ORDER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    order: _containers.RepeatedCompositeFieldContainer[_plan_pb2.OrderKey]
    limit: int
    offset: int
    project: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, order: _Optional[_Iterable[_Union[_plan_pb2.OrderKey, _Mapping]]] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., project: _Optional[_Iterable[int]] = ...) -> None: ...

class PeekSource(_message.Message):
    __slots__ = ("name", "collection")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    collection: _common_pb2.CollectionMetadata
    def __init__(self, name: _Optional[str] = ..., collection: _Optional[_Union[_common_pb2.CollectionMetadata, _Mapping]] = ...) -> None: ...

class Peek(_message.Message):
    __slots__ = ("uuid", "timestamp", "sources", "sql", "max_result_rows", "target_id", "map_filter_project", "finishing", "result_desc", "reply_subject", "direct")
    UUID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    SQL_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULT_ROWS_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    MAP_FILTER_PROJECT_FIELD_NUMBER: _ClassVar[int]
    FINISHING_FIELD_NUMBER: _ClassVar[int]
    RESULT_DESC_FIELD_NUMBER: _ClassVar[int]
    REPLY_SUBJECT_FIELD_NUMBER: _ClassVar[int]
    DIRECT_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    timestamp: int
    sources: _containers.RepeatedCompositeFieldContainer[PeekSource]
    sql: str
    max_result_rows: int
    target_id: str
    map_filter_project: _plan_pb2.MapFilterProject
    finishing: RowSetFinishing
    result_desc: _common_pb2.RelationDesc
    reply_subject: str
    direct: bool
    def __init__(self, uuid: _Optional[str] = ..., timestamp: _Optional[int] = ..., sources: _Optional[_Iterable[_Union[PeekSource, _Mapping]]] = ..., sql: _Optional[str] = ..., max_result_rows: _Optional[int] = ..., target_id: _Optional[str] = ..., map_filter_project: _Optional[_Union[_plan_pb2.MapFilterProject, _Mapping]] = ..., finishing: _Optional[_Union[RowSetFinishing, _Mapping]] = ..., result_desc: _Optional[_Union[_common_pb2.RelationDesc, _Mapping]] = ..., reply_subject: _Optional[str] = ..., direct: _Optional[bool] = ...) -> None: ...

class CancelPeek(_message.Message):
    __slots__ = ("uuid",)
    UUID_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    def __init__(self, uuid: _Optional[str] = ...) -> None: ...

class UpdateConfiguration(_message.Message):
    __slots__ = ("parameters", "logging", "introspection_snapshot")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    LOGGING_FIELD_NUMBER: _ClassVar[int]
    INTROSPECTION_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    parameters: _containers.ScalarMap[str, str]
    logging: LoggingConfig
    introspection_snapshot: bool
    def __init__(self, parameters: _Optional[_Mapping[str, str]] = ..., logging: _Optional[_Union[LoggingConfig, _Mapping]] = ..., introspection_snapshot: _Optional[bool] = ...) -> None: ...

class AllowCompaction(_message.Message):
    __slots__ = ("collection_id", "since", "empty")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    EMPTY_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    since: int
    empty: bool
    def __init__(self, collection_id: _Optional[str] = ..., since: _Optional[int] = ..., empty: _Optional[bool] = ...) -> None: ...

class ComputeResponse(_message.Message):
    __slots__ = ("replica_id", "incarnation", "hello", "heartbeat", "peek_response", "frontiers", "status", "subscribe_batch", "hydration", "collection_error", "introspection_updates")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    PEEK_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    FRONTIERS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_BATCH_FIELD_NUMBER: _ClassVar[int]
    HYDRATION_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_ERROR_FIELD_NUMBER: _ClassVar[int]
    INTROSPECTION_UPDATES_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    incarnation: int
    hello: Hello
    heartbeat: Heartbeat
    peek_response: PeekResponse
    frontiers: Frontiers
    status: Status
    subscribe_batch: SubscribeBatch
    hydration: Hydration
    collection_error: CollectionError
    introspection_updates: IntrospectionUpdates
    def __init__(self, replica_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., hello: _Optional[_Union[Hello, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., peek_response: _Optional[_Union[PeekResponse, _Mapping]] = ..., frontiers: _Optional[_Union[Frontiers, _Mapping]] = ..., status: _Optional[_Union[Status, _Mapping]] = ..., subscribe_batch: _Optional[_Union[SubscribeBatch, _Mapping]] = ..., hydration: _Optional[_Union[Hydration, _Mapping]] = ..., collection_error: _Optional[_Union[CollectionError, _Mapping]] = ..., introspection_updates: _Optional[_Union[IntrospectionUpdates, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("pid", "hostname")
    PID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    pid: int
    hostname: str
    def __init__(self, pid: _Optional[int] = ..., hostname: _Optional[str] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("process_id", "cpu_nano_cores", "memory_bytes", "disk_bytes", "workers", "initialized", "sent_at_ms", "engine_calls", "engine_busy_ms", "loop_lag_ms")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    CPU_NANO_CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CALLS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_BUSY_MS_FIELD_NUMBER: _ClassVar[int]
    LOOP_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    process_id: int
    cpu_nano_cores: int
    memory_bytes: int
    disk_bytes: int
    workers: int
    initialized: bool
    sent_at_ms: int
    engine_calls: int
    engine_busy_ms: int
    loop_lag_ms: int
    def __init__(self, process_id: _Optional[int] = ..., cpu_nano_cores: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., disk_bytes: _Optional[int] = ..., workers: _Optional[int] = ..., initialized: _Optional[bool] = ..., sent_at_ms: _Optional[int] = ..., engine_calls: _Optional[int] = ..., engine_busy_ms: _Optional[int] = ..., loop_lag_ms: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("collection_id", "write_frontier", "input_frontier", "empty")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    WRITE_FRONTIER_FIELD_NUMBER: _ClassVar[int]
    INPUT_FRONTIER_FIELD_NUMBER: _ClassVar[int]
    EMPTY_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    write_frontier: int
    input_frontier: int
    empty: bool
    def __init__(self, collection_id: _Optional[str] = ..., write_frontier: _Optional[int] = ..., input_frontier: _Optional[int] = ..., empty: _Optional[bool] = ...) -> None: ...

class UpdateRow(_message.Message):
    __slots__ = ("row", "time", "diff")
    ROW_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    row: _common_pb2.Row
    time: int
    diff: int
    def __init__(self, row: _Optional[_Union[_common_pb2.Row, _Mapping]] = ..., time: _Optional[int] = ..., diff: _Optional[int] = ...) -> None: ...

class SubscribeBatch(_message.Message):
    __slots__ = ("sink_id", "lower", "upper", "updates", "error")
    SINK_ID_FIELD_NUMBER: _ClassVar[int]
    LOWER_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    sink_id: str
    lower: int
    upper: int
    updates: _containers.RepeatedCompositeFieldContainer[UpdateRow]
    error: _common_pb2.Error
    def __init__(self, sink_id: _Optional[str] = ..., lower: _Optional[int] = ..., upper: _Optional[int] = ..., updates: _Optional[_Iterable[_Union[UpdateRow, _Mapping]]] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ...) -> None: ...

class Hydration(_message.Message):
    __slots__ = ("dataflow_id", "hydrated", "nodes_total", "nodes_hydrated", "records_read", "nodes", "export_ids", "hydration_time_ns", "records_done", "records_estimated", "installed_at_ms", "started_at_ms")
    DATAFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    HYDRATED_FIELD_NUMBER: _ClassVar[int]
    NODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NODES_HYDRATED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_READ_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    EXPORT_IDS_FIELD_NUMBER: _ClassVar[int]
    HYDRATION_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DONE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    INSTALLED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    dataflow_id: str
    hydrated: bool
    nodes_total: int
    nodes_hydrated: int
    records_read: int
    nodes: _containers.RepeatedCompositeFieldContainer[NodeHydration]
    export_ids: _containers.RepeatedScalarFieldContainer[str]
    hydration_time_ns: int
    records_done: int
    records_estimated: int
    installed_at_ms: int
    started_at_ms: int
    def __init__(self, dataflow_id: _Optional[str] = ..., hydrated: _Optional[bool] = ..., nodes_total: _Optional[int] = ..., nodes_hydrated: _Optional[int] = ..., records_read: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[NodeHydration, _Mapping]]] = ..., export_ids: _Optional[_Iterable[str]] = ..., hydration_time_ns: _Optional[int] = ..., records_done: _Optional[int] = ..., records_estimated: _Optional[int] = ..., installed_at_ms: _Optional[int] = ..., started_at_ms: _Optional[int] = ...) -> None: ...

class NodeHydration(_message.Message):
    __slots__ = ("lir_id", "worker_id", "hydrated", "records_done", "records_estimated")
    LIR_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HYDRATED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DONE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    lir_id: int
    worker_id: int
    hydrated: bool
    records_done: int
    records_estimated: int
    def __init__(self, lir_id: _Optional[int] = ..., worker_id: _Optional[int] = ..., hydrated: _Optional[bool] = ..., records_done: _Optional[int] = ..., records_estimated: _Optional[int] = ...) -> None: ...

class CollectionError(_message.Message):
    __slots__ = ("collection_id", "error", "since", "cleared")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    error: _common_pb2.Error
    since: int
    cleared: bool
    def __init__(self, collection_id: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., since: _Optional[int] = ..., cleared: _Optional[bool] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class IntrospectionUpdates(_message.Message):
    __slots__ = ("seq", "upper", "snapshot", "logs", "dropped_updates", "incomplete_since_ms")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_UPDATES_FIELD_NUMBER: _ClassVar[int]
    INCOMPLETE_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    upper: int
    snapshot: bool
    logs: _containers.RepeatedCompositeFieldContainer[LogUpdates]
    dropped_updates: int
    incomplete_since_ms: int
    def __init__(self, seq: _Optional[int] = ..., upper: _Optional[int] = ..., snapshot: _Optional[bool] = ..., logs: _Optional[_Iterable[_Union[LogUpdates, _Mapping]]] = ..., dropped_updates: _Optional[int] = ..., incomplete_since_ms: _Optional[int] = ...) -> None: ...

class LogUpdates(_message.Message):
    __slots__ = ("log", "arrow_ipc")
    LOG_FIELD_NUMBER: _ClassVar[int]
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    log: str
    arrow_ipc: bytes
    def __init__(self, log: _Optional[str] = ..., arrow_ipc: _Optional[bytes] = ...) -> None: ...
