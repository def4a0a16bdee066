"""The toolbench command and what its subcommands do."""
