"""delaymq server package."""
