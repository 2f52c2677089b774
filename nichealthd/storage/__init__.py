"""Durable storage: the state file and the event journal (outbox), written so nothing is lost."""
