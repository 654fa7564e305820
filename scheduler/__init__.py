"""delaymq scheduler package: delay-level messages (`delay_levels`) and the timer wheel (`timer/`)."""
