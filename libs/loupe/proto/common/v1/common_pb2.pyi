from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Value(_message.Message):
    __slots__ = ("bool_value", "int_value", "float_value", "text_value", "bytes_value", "timestamp_us", "date_days", "numeric_value", "jsonb_value", "list_value", "interval_value", "timestamp_naive_us", "time_us", "uuid_value", "uint_value")
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    TEXT_VALUE_FIELD_NUMBER: _ClassVar[int]
    BYTES_VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_US_FIELD_NUMBER: _ClassVar[int]
    DATE_DAYS_FIELD_NUMBER: _ClassVar[int]
    NUMERIC_VALUE_FIELD_NUMBER: _ClassVar[int]
    JSONB_VALUE_FIELD_NUMBER: _ClassVar[int]
    LIST_VALUE_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_NAIVE_US_FIELD_NUMBER: _ClassVar[int]
    TIME_US_FIELD_NUMBER: _ClassVar[int]
    UUID_VALUE_FIELD_NUMBER: _ClassVar[int]
    UINT_VALUE_FIELD_NUMBER: _ClassVar[int]
    bool_value: bool
    int_value: int
    float_value: float
    text_value: str
    bytes_value: bytes
    timestamp_us: int
    date_days: int
    numeric_value: str
    jsonb_value: str
    list_value: ValueList
    interval_value: IntervalValue
    timestamp_naive_us: int
    time_us: int
    uuid_value: str
    uint_value: int
    def __init__(self, bool_value: _Optional[bool] = ..., int_value: _Optional[int] = ..., float_value: _Optional[float] = ..., text_value: _Optional[str] = ..., bytes_value: _Optional[bytes] = ..., timestamp_us: _Optional[int] = ..., date_days: _Optional[int] = ..., numeric_value: _Optional[str] = ..., jsonb_value: _Optional[str] = ..., list_value: _Optional[_Union[ValueList, _Mapping]] = ..., interval_value: _Optional[_Union[IntervalValue, _Mapping]] = ..., timestamp_naive_us: _Optional[int] = ..., time_us: _Optional[int] = ..., uuid_value: _Optional[str] = ..., uint_value: _Optional[int] = ...) -> None: ...

class IntervalValue(_message.Message):
    __slots__ = ("months", "days", "micros")
    MONTHS_FIELD_NUMBER: _ClassVar[int]
    DAYS_FIELD_NUMBER: _ClassVar[int]
    MICROS_FIELD_NUMBER: _ClassVar[int]
    months: int
    days: int
    micros: int
    def __init__(self, months: _Optional[int] = ..., days: _Optional[int] = ..., micros: _Optional[int] = ...) -> None: ...

class ValueList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class Row(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("name", "type", "nullable")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    nullable: bool
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., nullable: _Optional[bool] = ...) -> None: ...

class RelationDesc(_message.Message):
    __slots__ = ("columns",)
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    def __init__(self, columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "detail", "hint", "position")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    detail: str
    hint: str
    position: int
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., detail: _Optional[str] = ..., hint: _Optional[str] = ..., position: _Optional[int] = ...) -> None: ...

class CollectionMetadata(_message.Message):
    __slots__ = ("collection_id", "shard_id", "blob_uri", "consensus_uri", "relation_desc")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    BLOB_URI_FIELD_NUMBER: _ClassVar[int]
    CONSENSUS_URI_FIELD_NUMBER: _ClassVar[int]
    RELATION_DESC_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    shard_id: str
    blob_uri: str
    consensus_uri: str
    relation_desc: RelationDesc
    def __init__(self, collection_id: _Optional[str] = ..., shard_id: _Optional[str] = ..., blob_uri: _Optional[str] = ..., consensus_uri: _Optional[str] = ..., relation_desc: _Optional[_Union[RelationDesc, _Mapping]] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
