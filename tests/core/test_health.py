"""The one health model of a port (README): the worst of its state and every open condition.

Table tests of :func:`nichealthd.core.health.assess` over hand-made states and snapshots.
"""

from __future__ import annotations

from typing import Any

from nichealthd.core.checks.counter_section import BreachFlag
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.checks.link_section import CardAnomaly, MissingDevice, PortRecord
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.health import assess
from nichealthd.core.state import DEGRADED, FATAL, HEALTHY, SUPPRESSED, MonitorState
from nichealthd.core.topology import Role

from .builders import DISABLED, DOWN, POLLING, T0, device, host, port, with_fields

COMPUTE = Role("compute", "GPU-local")


def record(dev: str, health: str, state: str = "4: ACTIVE", phys: str = "5: LinkUp",
           number: int = 1, misses: int = 0) -> PortRecord:
    return PortRecord(dev, number, state, phys, "InfiniBand", health, T0, misses)


def state(*records: PortRecord, breach_flags: Any = None, saturated: Any = None,
          **kw: Any) -> MonitorState:
    made = with_fields(MonitorState(), LINK_STATE,
                       port_states={f"{r.device}_{r.port}": r for r in records},
                       known_devices=sorted({r.device for r in records}), **kw)
    return with_fields(made, LINK_COUNTERS, breach_flags=breach_flags or {},
                       saturated=saturated or {})


def roles(*names: str) -> dict[str, Role]:
    return {n: COMPUTE for n in names}


def test_a_fatal_breach_on_an_active_port_makes_it_fatal_with_the_reason() -> None:
    flags = {"mlx5_5:1:link_downed": BreachFlag("IB", True, T0)}
    judged = assess(state(record("mlx5_5", HEALTHY), breach_flags=flags),
                    host(device("mlx5_5")), roles("mlx5_5"))
    one = judged.ports[("mlx5_5", 1)]
    assert (one.health, one.fatal, one.reasons) == (FATAL, True, ("link_downed breached",))
    assert judged.health == FATAL and judged.names(FATAL) == ["mlx5_5/1"]
    assert judged.problems() == ["mlx5_5/1 link_downed breached"]
    assert judged.counts()[FATAL] == 1 and judged.counts()[HEALTHY] == 0


def test_a_non_fatal_breach_or_saturation_degrades_and_never_lowers_a_fatal_state() -> None:
    flags = {"mlx5_0:1:symbol_error": BreachFlag("IB", False, T0),
             "mlx5_1:1:carrier_changes": BreachFlag("IB", False, T0)}
    judged = assess(
        state(record("mlx5_0", HEALTHY), record("mlx5_1", FATAL, DOWN, DISABLED),
              record("mlx5_2", HEALTHY), breach_flags=flags,
              saturated={"mlx5_2:1:symbol_error": T0}),
        host(device("mlx5_0"), device("mlx5_1", "0000:48:00.0"), device("mlx5_2", "0000:49:00.0")),
        roles("mlx5_0", "mlx5_1", "mlx5_2"))
    assert judged.ports[("mlx5_0", 1)].health == DEGRADED
    assert judged.ports[("mlx5_1", 1)].health == FATAL
    assert judged.ports[("mlx5_1", 1)].reasons == ("DOWN/Disabled", "carrier_changes breached")
    assert judged.ports[("mlx5_2", 1)].reasons == ("symbol_error saturated",)
    assert judged.ports[("mlx5_2", 1)].health == DEGRADED
    assert judged.health == FATAL


def test_state_conditions_uncabled_and_unknown() -> None:
    judged = assess(
        state(record("mlx5_0", DEGRADED, "2: INIT"), record("mlx5_1", SUPPRESSED, DOWN, POLLING)),
        host(device("mlx5_0"), device("mlx5_1", "0000:48:00.0", ports=(port("mlx5_1",
                                                                            state=DOWN),)),
             device("mlx5_2", "0000:49:00.0", ports=(port("mlx5_2", state=None),))),
        roles("mlx5_0", "mlx5_1", "mlx5_2"))
    assert judged.ports[("mlx5_0", 1)].health == DEGRADED
    assert judged.ports[("mlx5_0", 1)].reasons == ("INIT/LinkUp",)
    assert judged.ports[("mlx5_1", 1)].health == "uncabled"
    assert judged.ports[("mlx5_2", 1)].health == "unknown"
    assert judged.health == DEGRADED
    counts = judged.counts()
    assert (counts[DEGRADED], counts["uncabled"], counts["unknown"], counts["total"]) == \
        (1, 1, 1, 3)


def test_a_short_card_makes_its_inactive_port_fatal_never_its_uncabled_one() -> None:
    anomaly = CardAnomaly("compute", 0, 1, "IB", T0)
    judged = assess(
        state(record("mlx5_0", DEGRADED, "2: INIT"), record("mlx5_1", SUPPRESSED, DOWN, POLLING),
              record("mlx5_2", HEALTHY), card_anomalies={"0000:47:00": anomaly}),
        host(device("mlx5_0", "0000:47:00.0"), device("mlx5_1", "0000:47:00.1"),
             device("mlx5_2", "0000:47:00.2")),
        roles("mlx5_0", "mlx5_1", "mlx5_2"))
    short = judged.ports[("mlx5_0", 1)]
    assert short.health == FATAL
    assert short.reasons == ("INIT/LinkUp", "card 0000:47:00 has 0 of 1 ports active")
    assert judged.ports[("mlx5_1", 1)].health == "uncabled"
    assert judged.ports[("mlx5_2", 1)].health == HEALTHY
    assert judged.other == ()


def test_a_card_verdict_on_no_port_and_a_breach_of_an_unseen_port_still_count() -> None:
    judged = assess(
        state(record("mlx5_0", HEALTHY),
              card_anomalies={"0000:99:00": CardAnomaly("compute", 0, 1, "IB", T0)},
              breach_flags={"mlx5_7:1:link_downed": BreachFlag("IB", True, T0)}),
        host(device("mlx5_0")), roles("mlx5_0"))
    assert judged.ports[("mlx5_0", 1)].health == HEALTHY
    assert judged.health == FATAL
    assert judged.problems() == ["mlx5_7:1:link_downed breached",
                                 "card 0000:99:00 has 0 of 1 ports active"]


def test_a_missing_device_and_a_missing_port_are_fatal_ports() -> None:
    judged = assess(
        state(record("mlx5_0", HEALTHY), record("mlx5_0", HEALTHY, number=2, misses=3),
              record("mlx5_3", HEALTHY), record("mlx5_4", HEALTHY),
              missing_devices={"mlx5_3": MissingDevice("InfiniBand", T0)},
              device_misses={"mlx5_3": 3, "mlx5_4": 1}),
        host(device("mlx5_0")), roles("mlx5_0"))
    gone = judged.ports[("mlx5_3", 1)]
    assert (gone.health, gone.present, gone.reasons) == (FATAL, False, ("mlx5_3 missing",))
    lost_port = judged.ports[("mlx5_0", 2)]
    assert (lost_port.health, lost_port.reasons) == (FATAL, ("port missing",))
    held = judged.ports[("mlx5_4", 1)]  # not yet declared gone: the last health, held
    assert (held.health, held.reasons) == (HEALTHY, ("mlx5_4 not seen (1 polls)",))
    assert judged.names(FATAL) == ["mlx5_0/2", "mlx5_3/1"]


def test_ports_of_devices_not_monitored_are_not_judged() -> None:
    judged = assess(state(record("mlx5_0", FATAL, DOWN, DISABLED)), host(device("mlx5_0")),
                    {"mlx5_0": Role("management", "default route")})
    assert judged.ports == {} and judged.health == HEALTHY


def test_a_port_as_it_was_is_the_same_health_and_a_new_condition_a_new_one() -> None:
    """Every poll assesses every port: one whose health and reasons did not change is the
    same (frozen) object as before; a condition that opens on it makes a new one."""
    snapshot = host(device("mlx5_0"), device("mlx5_1", "0000:48:00.0"))
    quiet = state(record("mlx5_0", HEALTHY), record("mlx5_1", HEALTHY))
    first = assess(quiet, snapshot, roles("mlx5_0", "mlx5_1"))
    again = assess(quiet, snapshot, roles("mlx5_0", "mlx5_1"))
    assert again.ports[("mlx5_0", 1)] is first.ports[("mlx5_0", 1)]
    flags = {"mlx5_1:1:symbol_error": BreachFlag("IB", False, T0)}
    breached = assess(state(record("mlx5_0", HEALTHY), record("mlx5_1", HEALTHY),
                            breach_flags=flags), snapshot, roles("mlx5_0", "mlx5_1"))
    assert breached.ports[("mlx5_0", 1)] is first.ports[("mlx5_0", 1)]
    one = breached.ports[("mlx5_1", 1)]
    assert (one.health, one.reasons) == (DEGRADED, ("symbol_error breached",))
    assert first.ports[("mlx5_1", 1)].reasons == ()
