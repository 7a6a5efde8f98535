"""Share groups (KIP-932) on the group coordinator: membership and assignment. The share-partitions' delivery
state lives with the partition leaders (``pybroker.replication.share``)."""
