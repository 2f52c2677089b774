"""The link_state family's settings: the timings of its port, card and driver-event rules.

Beside :mod:`.link_state`, not in it, because the rules that read them (:mod:`.cards`,
:mod:`.driver`) are imported by that module; the other families that follow these timings
(``efa_state``'s cards and driver events, ``link_flaps``' and ``link_counters``' hold-down,
``lost_nics``' grace) read them from here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..duration import format_duration
from ..settings import AllSettings, Duration, Report, Settings, setting


@dataclass(frozen=True)
class LinkStateSettings(Settings):
    """nichealthd.toml(5): cardVerdictHoldTime, stateHoldDown, driverReload*."""

    # gpud's 4-minute drop rule (a port down >= 4 min is dropped).
    card_verdict_hold_time: float = setting(
        "cardVerdictHoldTime", 240.0, Duration(0.0, 86400.0),
        "How long, after the first poll, a card below its role group's mode")
    # 0: every healthy->unhealthy port edge at once (the spec's behaviour).
    state_hold_down: float = setting(
        "stateHoldDown", 0.0, Duration(0.0, 3600.0),
        "How long a port that was healthy must stay unhealthy before its port-state event "
        "is sent")
    # Every device gone at once: held this long before one non-fatal host event. The mlx5
    # driver itself waits up to 60 s for a firmware reset (MLX5_TO_FW_RESET_MS) and then up to
    # 120 s for the firmware to initialise (MLX5_TO_FW_PRE_INIT_TIMEOUT_MS), the defaults of
    # drivers/net/ethernet/mellanox/mlx5/core/lib/tout.c: 3 minutes.
    driver_reload_grace: float = setting(
        "driverReloadGrace", 180.0, Duration(0.0, 3600.0),
        "How long judgement is held when RDMA devices leave while their hardware stays")
    # ... and after this long the devices still gone are judged one by one (fatal,
    # link-state-detection §7).
    driver_reload_timeout: float = setting(
        "driverReloadTimeout", 900.0, Duration(1.0, 86400.0),
        "How long a device may stay gone in a driver event, counted from when it left, "
        "before it is judged")

    # ... except the devices of one card (or a few) gone while the other RDMA devices stay:
    # not a driver reload but a firmware reset of that card (under 2 minutes: the mlx5 reset
    # itself, then the firmware's initialisation), a probe that failed, or a function unbound
    # for good; judged after this long (capped by driverReloadTimeout), so that a training
    # job does not hang on a dead NIC for the whole-driver timeout.
    card_reset_timeout: float = setting(
        "cardResetTimeout", 150.0, Duration(1.0, 86400.0),
        "How long one card's RDMA devices may stay gone while other known RDMA devices stay "
        "present")

    def validate(self, config: AllSettings, report: Report) -> None:
        """driverReloadTimeout must exceed driverReloadGrace: the host event comes first."""
        grace, timeout = self.driver_reload_grace, self.driver_reload_timeout
        if timeout > grace:
            return
        if report.given("driverReloadTimeout"):
            report.problem("driverReloadTimeout", f"must be longer than driverReloadGrace "
                           f"({format_duration(grace)}), got {format_duration(timeout)}")
        else:
            report.problem("driverReloadGrace", f"must be shorter than driverReloadTimeout "
                           f"({format_duration(timeout)}), got {format_duration(grace)}")
