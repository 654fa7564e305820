"""The `delaymq` command line (mqadmin-style subcommands)."""
