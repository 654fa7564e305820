"""delaymq scheduler package."""
