"""Surfaces that plug into the running daemon: D-Bus, metrics, the connector, the event log."""
