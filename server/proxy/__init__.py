"""`delaymq-proxy`: a stateless RocketMQ 5 proxy (Apache's `mqproxy -pm cluster` topology), first cut.

One process, no store: it serves apache.rocketmq.v2.MessagingService over gRPC to 5.x clients and reaches
brokers only over the 4.x remoting protocol, found through the name server (GET_ROUTEINFO_BY_TOPIC).
Parts, composed by `proxy.Proxy`: `config` (ProxyConfig), `routes` (NameServerRoutes: the bounded route
cache), `brokers` (RemoteBrokers: SEND_MESSAGE_V2, POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME),
`service` (ProxyMessagingService: the gRPC face, on server.grpc's shared conversion and status modules).
Pop state lives in the brokers: a receipt handle is the broker's extraInfo, valid through any proxy.
"""
