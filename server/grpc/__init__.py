"""RocketMQ 5's gRPC MessagingService, served by the broker itself (no proxy) and by delaymq-proxy.

- `protos/`: apache/rocketmq/v2/{definition,service,admin}.proto from apache/rocketmq-apis
  (commit 3e60073c6dab3430feaec443824802e23ecda681), Apache License 2.0 headers kept.
- `v2/`: the generated Python code (`make protos`, server/grpc/codegen.py); never edited by hand.
- `service` (the RPCs, once) over a `backend.MessagingBackend`: `local_backend.LocalBackend` (the broker's
  store, send path and `server.pop`, shared with remoting) or server.proxy's `RemoteBackend` (brokers over
  remoting); `endpoint` (the grpc.aio server on the broker's loop), `convert` (proto message <-> RocketMQ
  properties/records),
  `telemetry` (the Telemetry stream, settings, orphaned-transaction checks), `auth` (MQv2-HMAC-SHA1),
  `status` (the proto's status codes).
"""
