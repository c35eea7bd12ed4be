"""What the writers of storage-managed collections and the controller's storage writer share.

``wire``: the columnar batches coordinators and replicas send to the storage
writer's JetStream inbox (``AppendUpdates``); ``schema``: how each builtin
collection's columns are ingested and written; ``names``: the JetStream names
the statement log's writer and collector agree on.
"""
