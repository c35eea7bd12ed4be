from loupe.proto.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SnapshotRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Cluster(_message.Message):
    __slots__ = ("id", "name", "owner_id", "managed", "size", "replication_factor", "introspection_interval_ns", "introspection_debugging")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    MANAGED_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    INTROSPECTION_INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    INTROSPECTION_DEBUGGING_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    owner_id: str
    managed: bool
    size: str
    replication_factor: int
    introspection_interval_ns: int
    introspection_debugging: bool
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., owner_id: _Optional[str] = ..., managed: _Optional[bool] = ..., size: _Optional[str] = ..., replication_factor: _Optional[int] = ..., introspection_interval_ns: _Optional[int] = ..., introspection_debugging: _Optional[bool] = ...) -> None: ...

class ClusterReplica(_message.Message):
    __slots__ = ("id", "name", "cluster_id", "size", "owner_id", "log_collections")
    class LogCollectionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    cluster_id: str
    size: str
    owner_id: str
    log_collections: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., cluster_id: _Optional[str] = ..., size: _Optional[str] = ..., owner_id: _Optional[str] = ..., log_collections: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CatalogSnapshot(_message.Message):
    __slots__ = ("epoch", "deploy_generation", "timestamp", "clusters", "replicas")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DEPLOY_GENERATION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    deploy_generation: int
    timestamp: int
    clusters: _containers.RepeatedCompositeFieldContainer[Cluster]
    replicas: _containers.RepeatedCompositeFieldContainer[ClusterReplica]
    def __init__(self, epoch: _Optional[int] = ..., deploy_generation: _Optional[int] = ..., timestamp: _Optional[int] = ..., clusters: _Optional[_Iterable[_Union[Cluster, _Mapping]]] = ..., replicas: _Optional[_Iterable[_Union[ClusterReplica, _Mapping]]] = ...) -> None: ...

class CreateCluster(_message.Message):
    __slots__ = ("cluster", "replicas")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    replicas: _containers.RepeatedCompositeFieldContainer[ClusterReplica]
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., replicas: _Optional[_Iterable[_Union[ClusterReplica, _Mapping]]] = ...) -> None: ...

class CreateClusterReplica(_message.Message):
    __slots__ = ("replica", "cluster_name")
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    replica: ClusterReplica
    cluster_name: str
    def __init__(self, replica: _Optional[_Union[ClusterReplica, _Mapping]] = ..., cluster_name: _Optional[str] = ...) -> None: ...

class DropCluster(_message.Message):
    __slots__ = ("name", "if_exists", "cascade")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    CASCADE_FIELD_NUMBER: _ClassVar[int]
    name: str
    if_exists: bool
    cascade: bool
    def __init__(self, name: _Optional[str] = ..., if_exists: _Optional[bool] = ..., cascade: _Optional[bool] = ...) -> None: ...

class DropClusterReplica(_message.Message):
    __slots__ = ("cluster_name", "replica_name", "if_exists")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICA_NAME_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    replica_name: str
    if_exists: bool
    def __init__(self, cluster_name: _Optional[str] = ..., replica_name: _Optional[str] = ..., if_exists: _Optional[bool] = ...) -> None: ...

class CatalogOp(_message.Message):
    __slots__ = ("create_cluster", "create_cluster_replica", "drop_cluster", "drop_cluster_replica")
    CREATE_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CREATE_CLUSTER_REPLICA_FIELD_NUMBER: _ClassVar[int]
    DROP_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    DROP_CLUSTER_REPLICA_FIELD_NUMBER: _ClassVar[int]
    create_cluster: CreateCluster
    create_cluster_replica: CreateClusterReplica
    drop_cluster: DropCluster
    drop_cluster_replica: DropClusterReplica
    def __init__(self, create_cluster: _Optional[_Union[CreateCluster, _Mapping]] = ..., create_cluster_replica: _Optional[_Union[CreateClusterReplica, _Mapping]] = ..., drop_cluster: _Optional[_Union[DropCluster, _Mapping]] = ..., drop_cluster_replica: _Optional[_Union[DropClusterReplica, _Mapping]] = ...) -> None: ...

class TransactRequest(_message.Message):
    __slots__ = ("ops",)
    OPS_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[CatalogOp]
    def __init__(self, ops: _Optional[_Iterable[_Union[CatalogOp, _Mapping]]] = ...) -> None: ...

class CatalogChange(_message.Message):
    __slots__ = ("cluster_created", "replica_created", "cluster_dropped", "replica_dropped")
    CLUSTER_CREATED_FIELD_NUMBER: _ClassVar[int]
    REPLICA_CREATED_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_DROPPED_FIELD_NUMBER: _ClassVar[int]
    REPLICA_DROPPED_FIELD_NUMBER: _ClassVar[int]
    cluster_created: Cluster
    replica_created: ClusterReplica
    cluster_dropped: Cluster
    replica_dropped: ClusterReplica
    def __init__(self, cluster_created: _Optional[_Union[Cluster, _Mapping]] = ..., replica_created: _Optional[_Union[ClusterReplica, _Mapping]] = ..., cluster_dropped: _Optional[_Union[Cluster, _Mapping]] = ..., replica_dropped: _Optional[_Union[ClusterReplica, _Mapping]] = ...) -> None: ...

class TransactResponse(_message.Message):
    __slots__ = ("timestamp", "changes", "snapshot")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    changes: _containers.RepeatedCompositeFieldContainer[CatalogChange]
    snapshot: CatalogSnapshot
    def __init__(self, timestamp: _Optional[int] = ..., changes: _Optional[_Iterable[_Union[CatalogChange, _Mapping]]] = ..., snapshot: _Optional[_Union[CatalogSnapshot, _Mapping]] = ...) -> None: ...

class EpochResponse(_message.Message):
    __slots__ = ("epoch", "deploy_generation")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DEPLOY_GENERATION_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    deploy_generation: int
    def __init__(self, epoch: _Optional[int] = ..., deploy_generation: _Optional[int] = ...) -> None: ...

class TimestampResponse(_message.Message):
    __slots__ = ("timestamp",)
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    def __init__(self, timestamp: _Optional[int] = ...) -> None: ...
