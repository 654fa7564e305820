"""The cluster rooms: name server and registration (namesrv/), master/slave replication (ha/)."""
