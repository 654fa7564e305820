"""The one error every codec decoder raises on malformed input."""


class CodecError(ValueError):
    """Malformed bytes: a frame, header, record or batch that cannot be decoded."""
