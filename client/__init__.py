"""delaymq client package."""
