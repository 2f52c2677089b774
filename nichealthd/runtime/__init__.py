"""The daemon itself: command line, start-up, the service loop, polling, notify and logging."""
