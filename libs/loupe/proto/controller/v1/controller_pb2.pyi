from loupe.proto.catalog.v1 import catalog_pb2 as _catalog_pb2
from loupe.proto.common.v1 import common_pb2 as _common_pb2
from loupe.proto.compute.v1 import compute_pb2 as _compute_pb2
from loupe.proto.compute.v1 import plan_pb2 as _plan_pb2
from loupe.proto.storage.v1 import storage_pb2 as _storage_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateDataflowRequest(_message.Message):
    __slots__ = ("cluster_id", "dataflow")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    DATAFLOW_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    dataflow: _plan_pb2.DataflowDescription
    def __init__(self, cluster_id: _Optional[str] = ..., dataflow: _Optional[_Union[_plan_pb2.DataflowDescription, _Mapping]] = ...) -> None: ...

class AllowCompactionRequest(_message.Message):
    __slots__ = ("cluster_id", "collection_ids", "since", "empty")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_IDS_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    EMPTY_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    collection_ids: _containers.RepeatedScalarFieldContainer[str]
    since: int
    empty: bool
    def __init__(self, cluster_id: _Optional[str] = ..., collection_ids: _Optional[_Iterable[str]] = ..., since: _Optional[int] = ..., empty: _Optional[bool] = ...) -> None: ...

class ListFrontiersRequest(_message.Message):
    __slots__ = ("cluster_id", "collection_ids")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_IDS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    collection_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cluster_id: _Optional[str] = ..., collection_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ReplicaFrontier(_message.Message):
    __slots__ = ("replica_id", "write_frontier")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    WRITE_FRONTIER_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    write_frontier: int
    def __init__(self, replica_id: _Optional[str] = ..., write_frontier: _Optional[int] = ...) -> None: ...

class CollectionFrontiers(_message.Message):
    __slots__ = ("collection_id", "write_frontier", "since", "replicas")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    WRITE_FRONTIER_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    write_frontier: int
    since: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaFrontier]
    def __init__(self, collection_id: _Optional[str] = ..., write_frontier: _Optional[int] = ..., since: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaFrontier, _Mapping]]] = ...) -> None: ...

class ListFrontiersResponse(_message.Message):
    __slots__ = ("collections",)
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[CollectionFrontiers]
    def __init__(self, collections: _Optional[_Iterable[_Union[CollectionFrontiers, _Mapping]]] = ...) -> None: ...

class CollectionStatus(_message.Message):
    __slots__ = ("collection_id", "error", "hydration")
    COLLECTION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HYDRATION_FIELD_NUMBER: _ClassVar[int]
    collection_id: str
    error: _common_pb2.Error
    hydration: _containers.RepeatedCompositeFieldContainer[_compute_pb2.Hydration]
    def __init__(self, collection_id: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., hydration: _Optional[_Iterable[_Union[_compute_pb2.Hydration, _Mapping]]] = ...) -> None: ...

class CollectionStatusResponse(_message.Message):
    __slots__ = ("collections",)
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[CollectionStatus]
    def __init__(self, collections: _Optional[_Iterable[_Union[CollectionStatus, _Mapping]]] = ...) -> None: ...

class ControllerStarted(_message.Message):
    __slots__ = ("boot_id", "started_at")
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    boot_id: str
    started_at: int
    def __init__(self, boot_id: _Optional[str] = ..., started_at: _Optional[int] = ...) -> None: ...

class PeekRoutes(_message.Message):
    __slots__ = ("boot_id", "routes")
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    boot_id: str
    routes: _containers.RepeatedCompositeFieldContainer[PeekRoute]
    def __init__(self, boot_id: _Optional[str] = ..., routes: _Optional[_Iterable[_Union[PeekRoute, _Mapping]]] = ...) -> None: ...

class PeekRoute(_message.Message):
    __slots__ = ("cluster_id", "replica_id", "incarnation")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    replica_id: str
    incarnation: int
    def __init__(self, cluster_id: _Optional[str] = ..., replica_id: _Optional[str] = ..., incarnation: _Optional[int] = ...) -> None: ...

class ApplyCatalogRequest(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: _catalog_pb2.CatalogSnapshot
    def __init__(self, snapshot: _Optional[_Union[_catalog_pb2.CatalogSnapshot, _Mapping]] = ...) -> None: ...

class ApplyCatalogResponse(_message.Message):
    __slots__ = ("replicas_started", "replicas_stopped")
    REPLICAS_STARTED_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_STOPPED_FIELD_NUMBER: _ClassVar[int]
    replicas_started: _containers.RepeatedScalarFieldContainer[str]
    replicas_stopped: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, replicas_started: _Optional[_Iterable[str]] = ..., replicas_stopped: _Optional[_Iterable[str]] = ...) -> None: ...

class PeekRequest(_message.Message):
    __slots__ = ("cluster_id", "replica_id", "peek", "timeout_ms")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    PEEK_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    replica_id: str
    peek: _compute_pb2.Peek
    timeout_ms: int
    def __init__(self, cluster_id: _Optional[str] = ..., replica_id: _Optional[str] = ..., peek: _Optional[_Union[_compute_pb2.Peek, _Mapping]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class AppendUpdatesRequest(_message.Message):
    __slots__ = ("batch_id", "collections")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    collections: _containers.RepeatedCompositeFieldContainer[_storage_pb2.CollectionUpdates]
    def __init__(self, batch_id: _Optional[str] = ..., collections: _Optional[_Iterable[_Union[_storage_pb2.CollectionUpdates, _Mapping]]] = ...) -> None: ...

class AppendUpdatesResponse(_message.Message):
    __slots__ = ("upper",)
    UPPER_FIELD_NUMBER: _ClassVar[int]
    upper: int
    def __init__(self, upper: _Optional[int] = ...) -> None: ...

class ListCollectionsResponse(_message.Message):
    __slots__ = ("collections",)
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[_common_pb2.CollectionMetadata]
    def __init__(self, collections: _Optional[_Iterable[_Union[_common_pb2.CollectionMetadata, _Mapping]]] = ...) -> None: ...
