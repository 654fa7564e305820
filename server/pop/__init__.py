"""Pop consumption, a broker-level room (composed by server/broker.py): `service` (PopService: receive,
ack, change invisible time, DLQ, long polling; PopDeps: what it uses of the broker), `state` (PopStore:
the in-flight deliveries, durable across kill -9), `model` (deliveries, gRPC receipt handles, TAG
filters, PopError). Front ends: the gRPC endpoint (server/grpc/service.py) and the remoting processors
(server/processors/pop.py, Apache's POP_MESSAGE / ACK_MESSAGE / ... codes with extraInfo receipts)."""
