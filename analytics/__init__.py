"""delaymq analytics package."""
