"""Console tools behind the minibroker subcommands."""
