"""delaymq codec package."""
