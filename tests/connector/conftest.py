"""Fixtures of the connector tests (helpers live in connector_fixtures.py)."""

from .connector_fixtures import close_senders, connector, sockdir  # noqa: F401
