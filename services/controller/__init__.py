"""The controller: orchestrates compute replicas and writes storage-managed collections."""
