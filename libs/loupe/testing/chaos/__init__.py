"""The chaos test: a workload on ``loupe up`` while processes are killed and paused.

``workload`` writes (with a ledger of what was acknowledged), reads and runs
DDL; ``faults`` SIGKILLs replicas, the controller, the coordinator, the
catalog service and the Spark JVM, and SIGSTOPs replicas; ``checker`` checks
writes, maintained views (against PostgreSQL), the catalog and the processes
after every fault; ``report`` prints the numbers; ``run`` ties them together
and ``serializability`` adds the strict serializability histories.
``python -m loupe.testing.chaos`` (``make chaos``) is the long run,
``tests/test_chaos.py`` the short one.
"""

from loupe.testing.chaos.run import RECOVERY_BOUND, Options, run_chaos

__all__ = ["RECOVERY_BOUND", "Options", "run_chaos"]
