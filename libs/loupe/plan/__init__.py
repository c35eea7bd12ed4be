"""Plans shared by the coordinator (which builds them) and replicas (which render them).

- ``scalar``: scalar expressions over a relation's columns;
- ``mir``: the relational plan SQL lowers to;
- ``lir``: the physical plan a replica renders, with node ids (seed 002);
- ``explain``: EXPLAIN text of both;
- ``codec``: LIR to and from its protobuf form (``loupe.proto.compute.v1.plan``).
"""
