"""One module per subcommand: parse flags, call the core, write through formats."""
