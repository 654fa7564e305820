"""delaymq remoting package."""
