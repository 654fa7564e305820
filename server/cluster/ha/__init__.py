"""Master/slave replication, RocketMQ 4.x HA protocol, and scheduled-message failover (ARCHITECTURE.md)."""
