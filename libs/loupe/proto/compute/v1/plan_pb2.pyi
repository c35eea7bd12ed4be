from loupe.proto.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScalarExpr(_message.Message):
    __slots__ = ("column", "literal", "call", "case", "cast")
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    LITERAL_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    CASE_FIELD_NUMBER: _ClassVar[int]
    CAST_FIELD_NUMBER: _ClassVar[int]
    column: int
    literal: LiteralExpr
    call: CallExpr
    case: CaseExpr
    cast: CastExpr
    def __init__(self, column: _Optional[int] = ..., literal: _Optional[_Union[LiteralExpr, _Mapping]] = ..., call: _Optional[_Union[CallExpr, _Mapping]] = ..., case: _Optional[_Union[CaseExpr, _Mapping]] = ..., cast: _Optional[_Union[CastExpr, _Mapping]] = ...) -> None: ...

class LiteralExpr(_message.Message):
    __slots__ = ("value", "type")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    value: _common_pb2.Value
    type: str
    def __init__(self, value: _Optional[_Union[_common_pb2.Value, _Mapping]] = ..., type: _Optional[str] = ...) -> None: ...

class CallExpr(_message.Message):
    __slots__ = ("func", "args")
    FUNC_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    func: str
    args: _containers.RepeatedCompositeFieldContainer[ScalarExpr]
    def __init__(self, func: _Optional[str] = ..., args: _Optional[_Iterable[_Union[ScalarExpr, _Mapping]]] = ...) -> None: ...

class CaseWhen(_message.Message):
    __slots__ = ("condition", "result")
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    condition: ScalarExpr
    result: ScalarExpr
    def __init__(self, condition: _Optional[_Union[ScalarExpr, _Mapping]] = ..., result: _Optional[_Union[ScalarExpr, _Mapping]] = ...) -> None: ...

class CaseExpr(_message.Message):
    __slots__ = ("whens", "otherwise")
    WHENS_FIELD_NUMBER: _ClassVar[int]
    OTHERWISE_FIELD_NUMBER: _ClassVar[int]
    whens: _containers.RepeatedCompositeFieldContainer[CaseWhen]
    otherwise: ScalarExpr
    def __init__(self, whens: _Optional[_Iterable[_Union[CaseWhen, _Mapping]]] = ..., otherwise: _Optional[_Union[ScalarExpr, _Mapping]] = ...) -> None: ...

class CastExpr(_message.Message):
    __slots__ = ("expr", "type")
    EXPR_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    expr: ScalarExpr
    type: str
    def __init__(self, expr: _Optional[_Union[ScalarExpr, _Mapping]] = ..., type: _Optional[str] = ...) -> None: ...

class ScalarList(_message.Message):
    __slots__ = ("exprs",)
    EXPRS_FIELD_NUMBER: _ClassVar[int]
    exprs: _containers.RepeatedCompositeFieldContainer[ScalarExpr]
    def __init__(self, exprs: _Optional[_Iterable[_Union[ScalarExpr, _Mapping]]] = ...) -> None: ...

class MapFilterProject(_message.Message):
    __slots__ = ("input_arity", "expressions", "predicates", "projection")
    INPUT_ARITY_FIELD_NUMBER: _ClassVar[int]
    EXPRESSIONS_FIELD_NUMBER: _ClassVar[int]
    PREDICATES_FIELD_NUMBER: _ClassVar[int]
    PROJECTION_FIELD_NUMBER: _ClassVar[int]
    input_arity: int
    expressions: _containers.RepeatedCompositeFieldContainer[ScalarExpr]
    predicates: _containers.RepeatedCompositeFieldContainer[ScalarExpr]
    projection: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, input_arity: _Optional[int] = ..., expressions: _Optional[_Iterable[_Union[ScalarExpr, _Mapping]]] = ..., predicates: _Optional[_Iterable[_Union[ScalarExpr, _Mapping]]] = ..., projection: _Optional[_Iterable[int]] = ...) -> None: ...

class AggregateExpr(_message.Message):
    __slots__ = ("func", "expr", "distinct", "args", "order_by")
    FUNC_FIELD_NUMBER: _ClassVar[int]
    EXPR_FIELD_NUMBER: _ClassVar[int]
    DISTINCT_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ORDER_BY_FIELD_NUMBER: _ClassVar[int]
    func: str
    expr: ScalarExpr
    distinct: bool
    args: _containers.RepeatedCompositeFieldContainer[ScalarExpr]
    order_by: _containers.RepeatedCompositeFieldContainer[AggregateOrder]
    def __init__(self, func: _Optional[str] = ..., expr: _Optional[_Union[ScalarExpr, _Mapping]] = ..., distinct: _Optional[bool] = ..., args: _Optional[_Iterable[_Union[ScalarExpr, _Mapping]]] = ..., order_by: _Optional[_Iterable[_Union[AggregateOrder, _Mapping]]] = ...) -> None: ...

class AggregateOrder(_message.Message):
    __slots__ = ("expr", "desc", "nulls_last")
    EXPR_FIELD_NUMBER: _ClassVar[int]
    DESC_FIELD_NUMBER: _ClassVar[int]
    NULLS_LAST_FIELD_NUMBER: _ClassVar[int]
    expr: ScalarExpr
    desc: bool
    nulls_last: bool
    def __init__(self, expr: _Optional[_Union[ScalarExpr, _Mapping]] = ..., desc: _Optional[bool] = ..., nulls_last: _Optional[bool] = ...) -> None: ...

class OrderKey(_message.Message):
    __slots__ = ("column", "desc", "nulls_last")
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    DESC_FIELD_NUMBER: _ClassVar[int]
    NULLS_LAST_FIELD_NUMBER: _ClassVar[int]
    column: int
    desc: bool
    nulls_last: bool
    def __init__(self, column: _Optional[int] = ..., desc: _Optional[bool] = ..., nulls_last: _Optional[bool] = ...) -> None: ...

class LirNode(_message.Message):
    __slots__ = ("id", "types", "constant", "get", "mfp", "flat_map", "arrange_by", "join", "reduce", "top_k", "negate", "threshold", "union", "window", "let_rec", "nested", "shared")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    CONSTANT_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    MFP_FIELD_NUMBER: _ClassVar[int]
    FLAT_MAP_FIELD_NUMBER: _ClassVar[int]
    ARRANGE_BY_FIELD_NUMBER: _ClassVar[int]
    JOIN_FIELD_NUMBER: _ClassVar[int]
    REDUCE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    NEGATE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    UNION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    LET_REC_FIELD_NUMBER: _ClassVar[int]
    NESTED_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    id: int
    types: _containers.RepeatedScalarFieldContainer[str]
    constant: ConstantNode
    get: GetNode
    mfp: MfpNode
    flat_map: FlatMapNode
    arrange_by: ArrangeByNode
    join: JoinNode
    reduce: ReduceNode
    top_k: TopKNode
    negate: NegateNode
    threshold: ThresholdNode
    union: UnionNode
    window: WindowNode
    let_rec: LetRecNode
    nested: bytes
    shared: int
    def __init__(self, id: _Optional[int] = ..., types: _Optional[_Iterable[str]] = ..., constant: _Optional[_Union[ConstantNode, _Mapping]] = ..., get: _Optional[_Union[GetNode, _Mapping]] = ..., mfp: _Optional[_Union[MfpNode, _Mapping]] = ..., flat_map: _Optional[_Union[FlatMapNode, _Mapping]] = ..., arrange_by: _Optional[_Union[ArrangeByNode, _Mapping]] = ..., join: _Optional[_Union[JoinNode, _Mapping]] = ..., reduce: _Optional[_Union[ReduceNode, _Mapping]] = ..., top_k: _Optional[_Union[TopKNode, _Mapping]] = ..., negate: _Optional[_Union[NegateNode, _Mapping]] = ..., threshold: _Optional[_Union[ThresholdNode, _Mapping]] = ..., union: _Optional[_Union[UnionNode, _Mapping]] = ..., window: _Optional[_Union[WindowNode, _Mapping]] = ..., let_rec: _Optional[_Union[LetRecNode, _Mapping]] = ..., nested: _Optional[bytes] = ..., shared: _Optional[int] = ...) -> None: ...

class ConstantNode(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[_common_pb2.Row]
    def __init__(self, rows: _Optional[_Iterable[_Union[_common_pb2.Row, _Mapping]]] = ...) -> None: ...

class GetNode(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class MfpNode(_message.Message):
    __slots__ = ("input", "mfp")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    MFP_FIELD_NUMBER: _ClassVar[int]
    input: LirNode
    mfp: MapFilterProject
    def __init__(self, input: _Optional[_Union[LirNode, _Mapping]] = ..., mfp: _Optional[_Union[MapFilterProject, _Mapping]] = ...) -> None: ...

class FlatMapNode(_message.Message):
    __slots__ = ("input", "func", "exprs", "mfp")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    FUNC_FIELD_NUMBER: _ClassVar[int]
    EXPRS_FIELD_NUMBER: _ClassVar[int]
    MFP_FIELD_NUMBER: _ClassVar[int]
    input: LirNode
    func: str
    exprs: _containers.RepeatedCompositeFieldContainer[ScalarExpr]
    mfp: MapFilterProject
    def __init__(self, input: _Optional[_Union[LirNode, _Mapping]] = ..., func: _Optional[str] = ..., exprs: _Optional[_Iterable[_Union[ScalarExpr, _Mapping]]] = ..., mfp: _Optional[_Union[MapFilterProject, _Mapping]] = ...) -> None: ...

class ArrangeByNode(_message.Message):
    __slots__ = ("input", "keys")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    input: LirNode
    keys: _containers.RepeatedCompositeFieldContainer[ScalarList]
    def __init__(self, input: _Optional[_Union[LirNode, _Mapping]] = ..., keys: _Optional[_Iterable[_Union[ScalarList, _Mapping]]] = ...) -> None: ...

class JoinNode(_message.Message):
    __slots__ = ("inputs", "equivalences", "kind")
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    EQUIVALENCES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedCompositeFieldContainer[LirNode]
    equivalences: _containers.RepeatedCompositeFieldContainer[ScalarList]
    kind: str
    def __init__(self, inputs: _Optional[_Iterable[_Union[LirNode, _Mapping]]] = ..., equivalences: _Optional[_Iterable[_Union[ScalarList, _Mapping]]] = ..., kind: _Optional[str] = ...) -> None: ...

class ReduceNode(_message.Message):
    __slots__ = ("input", "group_key", "aggregates", "kind")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    GROUP_KEY_FIELD_NUMBER: _ClassVar[int]
    AGGREGATES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    input: LirNode
    group_key: _containers.RepeatedCompositeFieldContainer[ScalarExpr]
    aggregates: _containers.RepeatedCompositeFieldContainer[AggregateExpr]
    kind: str
    def __init__(self, input: _Optional[_Union[LirNode, _Mapping]] = ..., group_key: _Optional[_Iterable[_Union[ScalarExpr, _Mapping]]] = ..., aggregates: _Optional[_Iterable[_Union[AggregateExpr, _Mapping]]] = ..., kind: _Optional[str] = ...) -> None: ...

class WindowFrameBound(_message.Message):
    __slots__ = ("kind", "offset", "distance")
    KIND_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    offset: int
    distance: ScalarExpr
    def __init__(self, kind: _Optional[str] = ..., offset: _Optional[int] = ..., distance: _Optional[_Union[ScalarExpr, _Mapping]] = ...) -> None: ...

class WindowFunctionExpr(_message.Message):
    __slots__ = ("func", "args", "mode", "start", "end")
    FUNC_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    func: str
    args: _containers.RepeatedScalarFieldContainer[int]
    mode: str
    start: WindowFrameBound
    end: WindowFrameBound
    def __init__(self, func: _Optional[str] = ..., args: _Optional[_Iterable[int]] = ..., mode: _Optional[str] = ..., start: _Optional[_Union[WindowFrameBound, _Mapping]] = ..., end: _Optional[_Union[WindowFrameBound, _Mapping]] = ...) -> None: ...

class WindowNode(_message.Message):
    __slots__ = ("input", "partition_by", "order", "functions")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    PARTITION_BY_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    FUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    input: LirNode
    partition_by: _containers.RepeatedScalarFieldContainer[int]
    order: _containers.RepeatedCompositeFieldContainer[OrderKey]
    functions: _containers.RepeatedCompositeFieldContainer[WindowFunctionExpr]
    def __init__(self, input: _Optional[_Union[LirNode, _Mapping]] = ..., partition_by: _Optional[_Iterable[int]] = ..., order: _Optional[_Iterable[_Union[OrderKey, _Mapping]]] = ..., functions: _Optional[_Iterable[_Union[WindowFunctionExpr, _Mapping]]] = ...) -> None: ...

class TopKNode(_message.Message):
    __slots__ = ("input", "order", "limit", "offset", "group_key")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    GROUP_KEY_FIELD_NUMBER: _ClassVar[int]
    input: LirNode
    order: _containers.RepeatedCompositeFieldContainer[OrderKey]
    limit: int
    offset: int
    group_key: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, input: _Optional[_Union[LirNode, _Mapping]] = ..., order: _Optional[_Iterable[_Union[OrderKey, _Mapping]]] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., group_key: _Optional[_Iterable[int]] = ...) -> None: ...

class NegateNode(_message.Message):
    __slots__ = ("input",)
    INPUT_FIELD_NUMBER: _ClassVar[int]
    input: LirNode
    def __init__(self, input: _Optional[_Union[LirNode, _Mapping]] = ...) -> None: ...

class ThresholdNode(_message.Message):
    __slots__ = ("input",)
    INPUT_FIELD_NUMBER: _ClassVar[int]
    input: LirNode
    def __init__(self, input: _Optional[_Union[LirNode, _Mapping]] = ...) -> None: ...

class UnionNode(_message.Message):
    __slots__ = ("inputs",)
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedCompositeFieldContainer[LirNode]
    def __init__(self, inputs: _Optional[_Iterable[_Union[LirNode, _Mapping]]] = ...) -> None: ...

class LetRecNode(_message.Message):
    __slots__ = ("names", "bindings", "body", "externals", "limit", "return_at_limit")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    EXTERNALS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    RETURN_AT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    bindings: _containers.RepeatedCompositeFieldContainer[LirNode]
    body: LirNode
    externals: _containers.RepeatedCompositeFieldContainer[LirNode]
    limit: int
    return_at_limit: bool
    def __init__(self, names: _Optional[_Iterable[str]] = ..., bindings: _Optional[_Iterable[_Union[LirNode, _Mapping]]] = ..., body: _Optional[_Union[LirNode, _Mapping]] = ..., externals: _Optional[_Iterable[_Union[LirNode, _Mapping]]] = ..., limit: _Optional[int] = ..., return_at_limit: _Optional[bool] = ...) -> None: ...

class SourceImport(_message.Message):
    __slots__ = ("id", "collection", "desc")
    ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DESC_FIELD_NUMBER: _ClassVar[int]
    id: str
    collection: _common_pb2.CollectionMetadata
    desc: _common_pb2.RelationDesc
    def __init__(self, id: _Optional[str] = ..., collection: _Optional[_Union[_common_pb2.CollectionMetadata, _Mapping]] = ..., desc: _Optional[_Union[_common_pb2.RelationDesc, _Mapping]] = ...) -> None: ...

class IndexImport(_message.Message):
    __slots__ = ("index_id", "on_id", "desc", "key")
    INDEX_ID_FIELD_NUMBER: _ClassVar[int]
    ON_ID_FIELD_NUMBER: _ClassVar[int]
    DESC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    index_id: str
    on_id: str
    desc: _common_pb2.RelationDesc
    key: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, index_id: _Optional[str] = ..., on_id: _Optional[str] = ..., desc: _Optional[_Union[_common_pb2.RelationDesc, _Mapping]] = ..., key: _Optional[_Iterable[int]] = ...) -> None: ...

class BuildDesc(_message.Message):
    __slots__ = ("id", "plan", "desc", "debug_name")
    ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    DESC_FIELD_NUMBER: _ClassVar[int]
    DEBUG_NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    plan: LirNode
    desc: _common_pb2.RelationDesc
    debug_name: str
    def __init__(self, id: _Optional[str] = ..., plan: _Optional[_Union[LirNode, _Mapping]] = ..., desc: _Optional[_Union[_common_pb2.RelationDesc, _Mapping]] = ..., debug_name: _Optional[str] = ...) -> None: ...

class IndexExport(_message.Message):
    __slots__ = ("index_id", "on_id", "key")
    INDEX_ID_FIELD_NUMBER: _ClassVar[int]
    ON_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    index_id: str
    on_id: str
    key: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, index_id: _Optional[str] = ..., on_id: _Optional[str] = ..., key: _Optional[_Iterable[int]] = ...) -> None: ...

class SinkExport(_message.Message):
    __slots__ = ("sink_id", "from_id", "persist", "subscribe")
    SINK_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_ID_FIELD_NUMBER: _ClassVar[int]
    PERSIST_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    sink_id: str
    from_id: str
    persist: _common_pb2.CollectionMetadata
    subscribe: SubscribeTarget
    def __init__(self, sink_id: _Optional[str] = ..., from_id: _Optional[str] = ..., persist: _Optional[_Union[_common_pb2.CollectionMetadata, _Mapping]] = ..., subscribe: _Optional[_Union[SubscribeTarget, _Mapping]] = ...) -> None: ...

class SubscribeTarget(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: bool
    def __init__(self, snapshot: _Optional[bool] = ...) -> None: ...

class DataflowDescription(_message.Message):
    __slots__ = ("id", "debug_name", "source_imports", "index_imports", "objects_to_build", "index_exports", "sink_exports", "as_of", "until")
    ID_FIELD_NUMBER: _ClassVar[int]
    DEBUG_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IMPORTS_FIELD_NUMBER: _ClassVar[int]
    INDEX_IMPORTS_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_TO_BUILD_FIELD_NUMBER: _ClassVar[int]
    INDEX_EXPORTS_FIELD_NUMBER: _ClassVar[int]
    SINK_EXPORTS_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    id: str
    debug_name: str
    source_imports: _containers.RepeatedCompositeFieldContainer[SourceImport]
    index_imports: _containers.RepeatedCompositeFieldContainer[IndexImport]
    objects_to_build: _containers.RepeatedCompositeFieldContainer[BuildDesc]
    index_exports: _containers.RepeatedCompositeFieldContainer[IndexExport]
    sink_exports: _containers.RepeatedCompositeFieldContainer[SinkExport]
    as_of: int
    until: int
    def __init__(self, id: _Optional[str] = ..., debug_name: _Optional[str] = ..., source_imports: _Optional[_Iterable[_Union[SourceImport, _Mapping]]] = ..., index_imports: _Optional[_Iterable[_Union[IndexImport, _Mapping]]] = ..., objects_to_build: _Optional[_Iterable[_Union[BuildDesc, _Mapping]]] = ..., index_exports: _Optional[_Iterable[_Union[IndexExport, _Mapping]]] = ..., sink_exports: _Optional[_Iterable[_Union[SinkExport, _Mapping]]] = ..., as_of: _Optional[int] = ..., until: _Optional[int] = ...) -> None: ...
