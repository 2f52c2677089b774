"""Forwarding committed events to NVSentinel's platform connector over gRPC (REFERENCE §1)."""
