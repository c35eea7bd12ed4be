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

class Database(_message.Message):
    __slots__ = ("id", "name", "owner_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    owner_id: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., owner_id: _Optional[str] = ...) -> None: ...

class Schema(_message.Message):
    __slots__ = ("id", "name", "database_id", "owner_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATABASE_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    database_id: str
    owner_id: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., database_id: _Optional[str] = ..., owner_id: _Optional[str] = ...) -> None: ...

class Role(_message.Message):
    __slots__ = ("id", "name", "inherit", "superuser", "login", "password_hash", "member_of")
    class MemberOfEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INHERIT_FIELD_NUMBER: _ClassVar[int]
    SUPERUSER_FIELD_NUMBER: _ClassVar[int]
    LOGIN_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_HASH_FIELD_NUMBER: _ClassVar[int]
    MEMBER_OF_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    inherit: bool
    superuser: bool
    login: bool
    password_hash: str
    member_of: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., inherit: _Optional[bool] = ..., superuser: _Optional[bool] = ..., login: _Optional[bool] = ..., password_hash: _Optional[str] = ..., member_of: _Optional[_Mapping[str, str]] = ...) -> None: ...

class AuditEvent(_message.Message):
    __slots__ = ("id", "event_type", "object_type", "details_json", "user", "occurred_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_TYPE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    event_type: str
    object_type: str
    details_json: str
    user: str
    occurred_at: int
    def __init__(self, id: _Optional[int] = ..., event_type: _Optional[str] = ..., object_type: _Optional[str] = ..., details_json: _Optional[str] = ..., user: _Optional[str] = ..., occurred_at: _Optional[int] = ...) -> None: ...

class Item(_message.Message):
    __slots__ = ("id", "schema_id", "name", "type", "owner_id", "create_sql", "cluster_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_SQL_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    schema_id: str
    name: str
    type: str
    owner_id: str
    create_sql: str
    cluster_id: str
    def __init__(self, id: _Optional[str] = ..., schema_id: _Optional[str] = ..., name: _Optional[str] = ..., type: _Optional[str] = ..., owner_id: _Optional[str] = ..., create_sql: _Optional[str] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class CatalogSnapshot(_message.Message):
    __slots__ = ("epoch", "deploy_generation", "timestamp", "clusters", "replicas", "databases", "schemas", "roles", "new_audit_events", "items", "system_configuration")
    class SystemConfigurationEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DEPLOY_GENERATION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    DATABASES_FIELD_NUMBER: _ClassVar[int]
    SCHEMAS_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    NEW_AUDIT_EVENTS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_CONFIGURATION_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    deploy_generation: int
    timestamp: int
    clusters: _containers.RepeatedCompositeFieldContainer[Cluster]
    replicas: _containers.RepeatedCompositeFieldContainer[ClusterReplica]
    databases: _containers.RepeatedCompositeFieldContainer[Database]
    schemas: _containers.RepeatedCompositeFieldContainer[Schema]
    roles: _containers.RepeatedCompositeFieldContainer[Role]
    new_audit_events: _containers.RepeatedCompositeFieldContainer[AuditEvent]
    items: _containers.RepeatedCompositeFieldContainer[Item]
    system_configuration: _containers.ScalarMap[str, str]
    def __init__(self, epoch: _Optional[int] = ..., deploy_generation: _Optional[int] = ..., timestamp: _Optional[int] = ..., clusters: _Optional[_Iterable[_Union[Cluster, _Mapping]]] = ..., replicas: _Optional[_Iterable[_Union[ClusterReplica, _Mapping]]] = ..., databases: _Optional[_Iterable[_Union[Database, _Mapping]]] = ..., schemas: _Optional[_Iterable[_Union[Schema, _Mapping]]] = ..., roles: _Optional[_Iterable[_Union[Role, _Mapping]]] = ..., new_audit_events: _Optional[_Iterable[_Union[AuditEvent, _Mapping]]] = ..., items: _Optional[_Iterable[_Union[Item, _Mapping]]] = ..., system_configuration: _Optional[_Mapping[str, str]] = ...) -> None: ...

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

class CreateItem(_message.Message):
    __slots__ = ("item",)
    ITEM_FIELD_NUMBER: _ClassVar[int]
    item: Item
    def __init__(self, item: _Optional[_Union[Item, _Mapping]] = ...) -> None: ...

class DropItem(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class CatalogOp(_message.Message):
    __slots__ = ("create_cluster", "create_cluster_replica", "drop_cluster", "drop_cluster_replica", "create_item", "drop_item", "set_system_variable", "create_role", "alter_role", "drop_role", "grant_role", "alter_cluster")
    CREATE_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CREATE_CLUSTER_REPLICA_FIELD_NUMBER: _ClassVar[int]
    DROP_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    DROP_CLUSTER_REPLICA_FIELD_NUMBER: _ClassVar[int]
    CREATE_ITEM_FIELD_NUMBER: _ClassVar[int]
    DROP_ITEM_FIELD_NUMBER: _ClassVar[int]
    SET_SYSTEM_VARIABLE_FIELD_NUMBER: _ClassVar[int]
    CREATE_ROLE_FIELD_NUMBER: _ClassVar[int]
    ALTER_ROLE_FIELD_NUMBER: _ClassVar[int]
    DROP_ROLE_FIELD_NUMBER: _ClassVar[int]
    GRANT_ROLE_FIELD_NUMBER: _ClassVar[int]
    ALTER_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    create_cluster: CreateCluster
    create_cluster_replica: CreateClusterReplica
    drop_cluster: DropCluster
    drop_cluster_replica: DropClusterReplica
    create_item: CreateItem
    drop_item: DropItem
    set_system_variable: SetSystemVariable
    create_role: CreateRole
    alter_role: AlterRole
    drop_role: DropRole
    grant_role: GrantRole
    alter_cluster: AlterCluster
    def __init__(self, create_cluster: _Optional[_Union[CreateCluster, _Mapping]] = ..., create_cluster_replica: _Optional[_Union[CreateClusterReplica, _Mapping]] = ..., drop_cluster: _Optional[_Union[DropCluster, _Mapping]] = ..., drop_cluster_replica: _Optional[_Union[DropClusterReplica, _Mapping]] = ..., create_item: _Optional[_Union[CreateItem, _Mapping]] = ..., drop_item: _Optional[_Union[DropItem, _Mapping]] = ..., set_system_variable: _Optional[_Union[SetSystemVariable, _Mapping]] = ..., create_role: _Optional[_Union[CreateRole, _Mapping]] = ..., alter_role: _Optional[_Union[AlterRole, _Mapping]] = ..., drop_role: _Optional[_Union[DropRole, _Mapping]] = ..., grant_role: _Optional[_Union[GrantRole, _Mapping]] = ..., alter_cluster: _Optional[_Union[AlterCluster, _Mapping]] = ...) -> None: ...

class AlterCluster(_message.Message):
    __slots__ = ("name", "introspection_interval_ns", "introspection_debugging")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INTROSPECTION_INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    INTROSPECTION_DEBUGGING_FIELD_NUMBER: _ClassVar[int]
    name: str
    introspection_interval_ns: int
    introspection_debugging: bool
    def __init__(self, name: _Optional[str] = ..., introspection_interval_ns: _Optional[int] = ..., introspection_debugging: _Optional[bool] = ...) -> None: ...

class CreateRole(_message.Message):
    __slots__ = ("name", "superuser", "login", "inherit", "password_hash")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUPERUSER_FIELD_NUMBER: _ClassVar[int]
    LOGIN_FIELD_NUMBER: _ClassVar[int]
    INHERIT_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_HASH_FIELD_NUMBER: _ClassVar[int]
    name: str
    superuser: bool
    login: bool
    inherit: bool
    password_hash: str
    def __init__(self, name: _Optional[str] = ..., superuser: _Optional[bool] = ..., login: _Optional[bool] = ..., inherit: _Optional[bool] = ..., password_hash: _Optional[str] = ...) -> None: ...

class AlterRole(_message.Message):
    __slots__ = ("name", "superuser", "login", "inherit", "password_hash")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUPERUSER_FIELD_NUMBER: _ClassVar[int]
    LOGIN_FIELD_NUMBER: _ClassVar[int]
    INHERIT_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_HASH_FIELD_NUMBER: _ClassVar[int]
    name: str
    superuser: bool
    login: bool
    inherit: bool
    password_hash: str
    def __init__(self, name: _Optional[str] = ..., superuser: _Optional[bool] = ..., login: _Optional[bool] = ..., inherit: _Optional[bool] = ..., password_hash: _Optional[str] = ...) -> None: ...

class DropRole(_message.Message):
    __slots__ = ("name", "if_exists")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    if_exists: bool
    def __init__(self, name: _Optional[str] = ..., if_exists: _Optional[bool] = ...) -> None: ...

class GrantRole(_message.Message):
    __slots__ = ("role", "member", "grantor", "revoke")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    GRANTOR_FIELD_NUMBER: _ClassVar[int]
    REVOKE_FIELD_NUMBER: _ClassVar[int]
    role: str
    member: str
    grantor: str
    revoke: bool
    def __init__(self, role: _Optional[str] = ..., member: _Optional[str] = ..., grantor: _Optional[str] = ..., revoke: _Optional[bool] = ...) -> None: ...

class SetSystemVariable(_message.Message):
    __slots__ = ("name", "value", "reset")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    reset: bool
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., reset: _Optional[bool] = ...) -> None: ...

class TransactRequest(_message.Message):
    __slots__ = ("ops", "user")
    OPS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[CatalogOp]
    user: str
    def __init__(self, ops: _Optional[_Iterable[_Union[CatalogOp, _Mapping]]] = ..., user: _Optional[str] = ...) -> None: ...

class CatalogChange(_message.Message):
    __slots__ = ("cluster_created", "replica_created", "cluster_dropped", "replica_dropped", "item_created", "item_dropped")
    CLUSTER_CREATED_FIELD_NUMBER: _ClassVar[int]
    REPLICA_CREATED_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_DROPPED_FIELD_NUMBER: _ClassVar[int]
    REPLICA_DROPPED_FIELD_NUMBER: _ClassVar[int]
    ITEM_CREATED_FIELD_NUMBER: _ClassVar[int]
    ITEM_DROPPED_FIELD_NUMBER: _ClassVar[int]
    cluster_created: Cluster
    replica_created: ClusterReplica
    cluster_dropped: Cluster
    replica_dropped: ClusterReplica
    item_created: Item
    item_dropped: Item
    def __init__(self, cluster_created: _Optional[_Union[Cluster, _Mapping]] = ..., replica_created: _Optional[_Union[ClusterReplica, _Mapping]] = ..., cluster_dropped: _Optional[_Union[Cluster, _Mapping]] = ..., replica_dropped: _Optional[_Union[ClusterReplica, _Mapping]] = ..., item_created: _Optional[_Union[Item, _Mapping]] = ..., item_dropped: _Optional[_Union[Item, _Mapping]] = ...) -> None: ...

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

class ListAuditEventsRequest(_message.Message):
    __slots__ = ("after_id",)
    AFTER_ID_FIELD_NUMBER: _ClassVar[int]
    after_id: int
    def __init__(self, after_id: _Optional[int] = ...) -> None: ...

class ListAuditEventsResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[AuditEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[AuditEvent, _Mapping]]] = ...) -> None: ...

class EditObjectRequest(_message.Message):
    __slots__ = ("kind", "key_json", "value_json")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KEY_JSON_FIELD_NUMBER: _ClassVar[int]
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    key_json: str
    value_json: str
    def __init__(self, kind: _Optional[str] = ..., key_json: _Optional[str] = ..., value_json: _Optional[str] = ...) -> None: ...

class EditObjectResponse(_message.Message):
    __slots__ = ("old_value_json",)
    OLD_VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    old_value_json: str
    def __init__(self, old_value_json: _Optional[str] = ...) -> None: ...
