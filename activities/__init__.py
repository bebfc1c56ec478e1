"""I/O adapters run as Temporal activities: the model call and tool execution."""
