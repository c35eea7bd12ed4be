from loupe.proto.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpenSessionRequest(_message.Message):
    __slots__ = ("user", "password", "application_name", "options")
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    USER_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    user: str
    password: str
    application_name: str
    options: _containers.ScalarMap[str, str]
    def __init__(self, user: _Optional[str] = ..., password: _Optional[str] = ..., application_name: _Optional[str] = ..., options: _Optional[_Mapping[str, str]] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("session_id", "parameters")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    parameters: _containers.ScalarMap[str, str]
    def __init__(self, session_id: _Optional[str] = ..., parameters: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("session_id", "sql", "params")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SQL_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    sql: str
    params: _containers.RepeatedCompositeFieldContainer[_common_pb2.Value]
    def __init__(self, session_id: _Optional[str] = ..., sql: _Optional[str] = ..., params: _Optional[_Iterable[_Union[_common_pb2.Value, _Mapping]]] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ("description", "rows", "complete", "error", "notice", "progress")
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NOTICE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    description: _common_pb2.RelationDesc
    rows: RowBatch
    complete: CommandComplete
    error: _common_pb2.Error
    notice: Notice
    progress: Progress
    def __init__(self, description: _Optional[_Union[_common_pb2.RelationDesc, _Mapping]] = ..., rows: _Optional[_Union[RowBatch, _Mapping]] = ..., complete: _Optional[_Union[CommandComplete, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., notice: _Optional[_Union[Notice, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("object", "nodes_hydrated", "nodes_total", "records_read", "hydrated", "unit", "records_done", "records_estimated", "eta_ms")
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    NODES_HYDRATED_FIELD_NUMBER: _ClassVar[int]
    NODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RECORDS_READ_FIELD_NUMBER: _ClassVar[int]
    HYDRATED_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DONE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    ETA_MS_FIELD_NUMBER: _ClassVar[int]
    object: str
    nodes_hydrated: int
    nodes_total: int
    records_read: int
    hydrated: bool
    unit: str
    records_done: int
    records_estimated: int
    eta_ms: int
    def __init__(self, object: _Optional[str] = ..., nodes_hydrated: _Optional[int] = ..., nodes_total: _Optional[int] = ..., records_read: _Optional[int] = ..., hydrated: _Optional[bool] = ..., unit: _Optional[str] = ..., records_done: _Optional[int] = ..., records_estimated: _Optional[int] = ..., eta_ms: _Optional[int] = ...) -> None: ...

class RowBatch(_message.Message):
    __slots__ = ("rows", "streaming")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    STREAMING_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[_common_pb2.Row]
    streaming: bool
    def __init__(self, rows: _Optional[_Iterable[_Union[_common_pb2.Row, _Mapping]]] = ..., streaming: _Optional[bool] = ...) -> None: ...

class CommandComplete(_message.Message):
    __slots__ = ("tag",)
    TAG_FIELD_NUMBER: _ClassVar[int]
    tag: str
    def __init__(self, tag: _Optional[str] = ...) -> None: ...

class Notice(_message.Message):
    __slots__ = ("severity", "message")
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    severity: str
    message: str
    def __init__(self, severity: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("canceled",)
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    canceled: bool
    def __init__(self, canceled: _Optional[bool] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...
