"""delaymq storage package."""
