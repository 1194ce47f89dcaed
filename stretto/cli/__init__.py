"""The `stretto` command, one module per command family."""
