"""`agent-worker`: serves conversations and their activities on the agent task queue."""
