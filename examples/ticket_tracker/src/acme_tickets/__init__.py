"""A small ticket tracker on SQLite, as tools for the durable ReAct agent (`acme_tickets.tools`)."""
