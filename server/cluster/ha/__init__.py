"""Master/slave replication, RocketMQ 4.x HA protocol, and scheduled-message failover.

RocketMQ 4.x classic HA, wire-compatible with Apache both ways (../shared/reference/cluster-ha.md §2).
Keys: `brokerRole` (ASYNC_MASTER | SYNC_MASTER | SLAVE), `brokerId` (0 master, >= 1 slave),
`haListenPort` (0 = listenPort+1), `haMasterAddress` (no name server), `haSendHeartbeatInterval`,
`haHousekeepingInterval`, `haTransferBatchSize`, `haSlaveFallbehindMax`, `slaveTimeout`,
`slaveSynchronizeIntervalMs` (10 s), `schedulerSyncIntervalMs` (ours, 10 ms).

    master: put -> CommitLog -> HAService (master.py, on haListenPort; one HAConnection per slave)
            [phyOffset 8B][size 4B][<= 32 KiB raw CommitLog, never across a segment] --TCP--> slave
    slave:  HAClient (slave.py) -> MessageStore.append_replica(offset, bytes) (storage.replica: verbatim,
            at the CommitLog end) -> reput() (ConsumeQueue units, index keys, dispatch listeners)
            -> report [maxOffset 8B] --> master: SYNC_MASTER sends answered

- The frames are `codec.ha`'s (sans-io); the store side is `storage.replica.ReplicaAppender`, a part of
  the MessageStore with no network (a read-only store answers puts SERVICE_NOT_AVAILABLE).
- SYNC_MASTER: one wait per put run for its last byte: no slave, or the slave more than
  haSlaveFallbehindMax bytes behind -> SLAVE_NOT_AVAILABLE; no ack within slaveTimeout -> FLUSH_SLAVE_TIMEOUT (stored either way).
- `sync.SlaveSynchronize`: the master's tables and its scheduler progress (`scheduler.progress`), adopted
  only once the slave's CommitLog holds everything the record claims.
- `learned.ReplicatedTopics`: a topic (or queue) a replicated record lands in or names as its REAL_TOPIC,
  unknown until the next metadata sync, is created at once (a promoted slave serves every topic it holds).
- A slave delivers nothing: delay levels and transaction check-backs do not start, and the timer wheel
  only follows (`scheduler.timer.follow.Follower`), linking each unit into the slot the master used.
- `service.ReplicaRole.promote()` (PROMOTE_BROKER 3101, `delaymq broker promote -b ADDR`) makes a slave the
  master live; see `service`. A slave whose HA epoch is older than its master's (GET_HA_EPOCH 3103)
  truncates its CommitLog and ConsumeQueues to the master's epoch start before following (`ha.rejoin`).
- With `namesrvAddr` a slave follows the master its REGISTER_BROKER answer names, so a promotion elsewhere
  re-points it. Pulls on a slave answer suggestWhichBrokerId 0 (slaveReadEnable=false); a slave turns
  PULL_OFFSET_MOVED into PULL_RETRY_IMMEDIATELY and stores no offset from a pull, as RocketMQ's does.
- HA client, metadata sync and progress sync run under the store's supervisor.
- Controller mode (enableControllerMode) replaces the 4.x frames by RocketMQ 5's AutoSwitch HA
  (autoswitch_master.AutoSwitchHAService, autoswitch_slave.AutoSwitchHAClient; codec.autoswitch_ha,
  storage.epoch_file): handshake with the slave's brokerId, epoch entries, truncation to the consistent
  point, per-slave acks, SyncStateSet expand/shrink and allAckInSyncStateSet; wire-compatible with
  Apache 5.1.3 brokers both ways.
- Both protocols are given the same parts, each file keeping only what its protocol says: a slave's
  `link.MasterLink` (supervised reconnect loop, keepalive, logging; the client is its MasterSession) and
  `link.ReplicaApplier` (continue-the-CommitLog check, replica append, ack, reput, on_applied); a master's
  `slaves.SlaveListener` (haListenPort, the connected slaves, wake on dispatch) and `slaves.AckWaiters`.
"""
