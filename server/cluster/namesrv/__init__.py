"""The name server: `route_info` (RouteInfoManager, the route tables), `kv_config` (KVConfigManager),
`processor` (request codes -> handlers, shared with the broker's embedded mode through the
`RouteSource` protocol), `controller` (NamesrvController: listener, expiry scan), `__main__`
(`delaymq-namesrv`)."""
