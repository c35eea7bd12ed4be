from loupe.proto.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Part(_message.Message):
    __slots__ = ("key", "lower", "upper", "rows", "bytes")
    KEY_FIELD_NUMBER: _ClassVar[int]
    LOWER_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    key: str
    lower: int
    upper: int
    rows: int
    bytes: int
    def __init__(self, key: _Optional[str] = ..., lower: _Optional[int] = ..., upper: _Optional[int] = ..., rows: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class ShardState(_message.Message):
    __slots__ = ("shard_id", "seqno", "since", "upper", "parts", "relation_desc", "progress")
    class ProgressEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    SEQNO_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    RELATION_DESC_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    shard_id: str
    seqno: int
    since: int
    upper: int
    parts: _containers.RepeatedCompositeFieldContainer[Part]
    relation_desc: _common_pb2.RelationDesc
    progress: _containers.ScalarMap[str, int]
    def __init__(self, shard_id: _Optional[str] = ..., seqno: _Optional[int] = ..., since: _Optional[int] = ..., upper: _Optional[int] = ..., parts: _Optional[_Iterable[_Union[Part, _Mapping]]] = ..., relation_desc: _Optional[_Union[_common_pb2.RelationDesc, _Mapping]] = ..., progress: _Optional[_Mapping[str, int]] = ...) -> None: ...

class CollectionUpdates(_message.Message):
    __slots__ = ("collection_id", "updates", "arrow_ipc")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    updates: _containers.RepeatedCompositeFieldContainer[Update]
    arrow_ipc: bytes
    def __init__(self, collection_id: _Optional[str] = ..., updates: _Optional[_Iterable[_Union[Update, _Mapping]]] = ..., arrow_ipc: _Optional[bytes] = ...) -> None: ...

class Update(_message.Message):
    __slots__ = ("row", "timestamp", "diff")
    ROW_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    row: _common_pb2.Row
    timestamp: int
    diff: int
    def __init__(self, row: _Optional[_Union[_common_pb2.Row, _Mapping]] = ..., timestamp: _Optional[int] = ..., diff: _Optional[int] = ...) -> None: ...

class UpdateBatch(_message.Message):
    __slots__ = ("batch_id", "collections")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    collections: _containers.RepeatedCompositeFieldContainer[CollectionUpdates]
    def __init__(self, batch_id: _Optional[str] = ..., collections: _Optional[_Iterable[_Union[CollectionUpdates, _Mapping]]] = ...) -> None: ...
