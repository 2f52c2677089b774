"""``nichealthd_connector_state``: a host without NVSentinel (no connector configured, or its
socket never seen) is told apart from a connector that is down, which ``connector_up`` (0 in
both) cannot do; ``connector_up`` keeps its meaning."""

from __future__ import annotations

import pytest

from nichealthd.surfaces.connector.status import ConnectorStatus
from nichealthd.surfaces.metrics import CONNECTOR_STATES, MetricsService

from .test_healthz import Loop


def scrape(state: str) -> dict[str, float]:
    """The connector series of one scrape while the connector is in ``state``."""
    loop = Loop("127.0.0.1:2112")
    context = loop.context()
    object.__setattr__(context, "connector", lambda: ConnectorStatus(state=state))
    out = {}
    for family in MetricsService(context).families():
        for sample in family.samples:
            if sample.name == "nichealthd_connector_up":
                out["up"] = sample.value
            elif sample.name == "nichealthd_connector_state":
                out[sample.labels["state"]] = sample.value
    return out


@pytest.mark.parametrize("state", CONNECTOR_STATES)
def test_exactly_the_current_state_is_1(state: str) -> None:
    values = scrape(state)
    assert {k: v for k, v in values.items() if k != "up"} == {
        s: (1.0 if s == state else 0.0) for s in CONNECTOR_STATES}
    assert values["up"] == (1.0 if state == "connected" else 0.0)


def test_a_state_this_list_does_not_know_is_still_shown() -> None:
    assert scrape("draining")["draining"] == 1.0
