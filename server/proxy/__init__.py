"""`delaymq-proxy`: a stateless RocketMQ 5 proxy (Apache's `mqproxy -pm cluster` topology).

One process, no store: it serves apache.rocketmq.v2.MessagingService over gRPC to 5.x clients and reaches
brokers only over the 4.x remoting protocol, found through the name server (GET_ROUTEINFO_BY_TOPIC).
Parts, composed by `proxy.Proxy`: `config` (ProxyConfig), `routes` (NameServerRoutes: the bounded route
cache), `brokers` (RemoteBrokers: the remoting requests), `backend` (RemoteBackend: server.grpc's
MessagingBackend over them), `sessions` (ProxySessions: the 5.x producers, for transaction checks); the gRPC
face is server.grpc.service.MessagingService, the same as the broker's own endpoint.
Pop state lives in the brokers: a receipt handle is the broker's extraInfo, valid through any proxy.
"""
