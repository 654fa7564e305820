"""The cluster room: the standalone name server (`namesrv/`), the broker's registration with name
servers (`registration`), and master/slave HA (`ha/`)."""
