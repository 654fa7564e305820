"""Controller mode (RocketMQ 5's RIP-44; cluster-ha.md §4): with `enableControllerMode=true` and
`controllerAddr=a:p[;b:p]` the broker is a member of a replica group whose master Apache's controller
elects. Parts, composed by server.broker.BrokerController through `ControllerMode`:

- `client.ControllerClient`: finds the leader controller (CONTROLLER_GET_METADATA_INFO) and sends to it,
  finding it again when it moves (CONTROLLER_NOT_LEADER or a lost connection); heartbeats go to all.
- `identity.BrokerIdentityFiles`: the brokerIdentity / brokerIdentity-temp files in storePathRootDir.
- `replicas.ReplicasManager`: the broker-id flow, registration, heartbeats, periodic GET_REPLICA_INFO,
  the SyncStateSet report (ALTER_SYNC_STATE_SET) and the role the controller gives.
- `failover.FailoverClock`: how long a failover took (master lost -> master here -> first delivery),
  logged and exported.
- `processor`: NOTIFY_BROKER_ROLE_CHANGED (the controller's push after an election).

Replication still runs over the classic 4.x HA transfer (server/cluster/ha) and a promotion is
ReplicaRole.promote; AutoSwitch HA (handshake, epoch file, epoch truncation; issue 25 item 2) is not here.
"""
