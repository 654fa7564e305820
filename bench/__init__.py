"""delaymq benchmark suite: `python -m bench.run_all [--only NAME,...] [--quick]` (see bench/README.md)."""
