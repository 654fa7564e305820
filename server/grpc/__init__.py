"""RocketMQ 5's gRPC MessagingService served by the broker itself (no proxy), on the same store.

- `protos/`: apache/rocketmq/v2/{definition,service,admin}.proto from apache/rocketmq-apis
  (commit 3e60073c6dab3430feaec443824802e23ecda681), Apache License 2.0 headers kept.
- `v2/`: the generated Python code (`make protos`, server/grpc/codegen.py); never edited by hand.
- `endpoint` (the grpc.aio server on the broker's loop), `service` (the RPCs), `convert` (proto
  message <-> RocketMQ properties/records); pop consumption is the broker's `server.pop` (shared with remoting),
  `telemetry` (the Telemetry stream, settings, orphaned-transaction checks), `auth` (MQv2-HMAC-SHA1),
  `status` (the proto's status codes).
"""
