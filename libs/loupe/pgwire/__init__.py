"""The PostgreSQL wire protocol (v3), as Loupe's coordinator speaks it.

- ``protocol``: message framing, frontend message parsing, backend message building.
- ``types``: values in PostgreSQL's text and binary formats, by Loupe type name / OID.
- ``scram``: SCRAM-SHA-256 (RFC 5802/7677) server side, and PostgreSQL-format verifiers.

Sessions, planning and execution stay the coordinator's (``loupe.coordinator.pgwire``
serves connections on top of the same session layer as the gRPC API).
"""
