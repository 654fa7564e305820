"""Errors raised by remoting calls."""


class RemotingError(Exception):
    pass


class RemotingTimeoutError(RemotingError, TimeoutError):
    """No response within the timeout."""


class ConnectionClosedError(RemotingError, ConnectionError):
    """The connection closed before the response arrived."""
