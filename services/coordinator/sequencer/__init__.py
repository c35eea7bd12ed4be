"""Statements sequenced by family: one module per kind of statement.

``Coordinator.run_statement`` hands each statement to the module of its
family (as Materialize's adapter does in ``coord/sequencer/inner``); each
module's functions take the ``SequencerContext`` (``context``) first: the
coordinator's clients, oracle, tables, compute and catalog view, and nothing
of its sessions layer.

| module | sequences |
|---|---|
| ``select`` | ``SELECT`` (compute, or the constant strategy here); ``run_query`` for ``INSERT … SELECT`` and ``EXECUTE``'s arguments |
| ``explain`` | ``EXPLAIN [OPTIMIZED | PHYSICAL] PLAN … FOR`` a query or an object |
| ``show`` | ``SHOW CLUSTERS | CLUSTER REPLICAS | ROLES | TABLES | … | COLUMNS | CREATE …`` (as SELECTs) |
| ``dml`` | ``INSERT``, ``UPDATE``, ``DELETE`` |
| ``table`` | ``CREATE TABLE``, ``DROP TABLE``; which table a written name means |
| ``source`` | ``CREATE SOURCE … FROM LOAD GENERATOR TPCH`` and its loading |
| ``cluster`` | ``CREATE CLUSTER``, ``CREATE | DROP CLUSTER REPLICA``; ``catalog_op`` |
| ``roles`` | ``CREATE | ALTER | DROP ROLE``, ``GRANT | REVOKE`` role |
| ``variables`` | ``SET``, ``SHOW``, ``RESET``, ``ALTER SYSTEM SET | RESET`` |
| ``ddl`` | what DDL shares: superuser check, owner, target schema, ``transact``, ``after_ddl`` |
| ``peek`` | the controller ``Peek`` round trip and its cancelation |
| ``context`` | ``SequencerContext`` |

Elsewhere: ``CREATE VIEW | MATERIALIZED VIEW | INDEX``, ``DROP VIEW | … |
INDEX | SOURCE``, ``DROP CLUSTER`` and ``SUBSCRIBE`` are sequenced by
``loupe.coordinator.compute`` (they build or free dataflows);
``PREPARE``/``DEALLOCATE`` by ``loupe.coordinator.prepared``; ``EXECUTE`` is
bound to the statement it names before it is sequenced.
"""
