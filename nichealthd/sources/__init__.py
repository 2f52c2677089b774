"""What is read from the host (sysfs ports and counters, GPU metadata, routes) as plain data."""
