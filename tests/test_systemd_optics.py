"""systemd/examples/optics.conf: the drop-in for the module reads grants CAP_NET_ADMIN and
nothing else, and the unit with it stays within the exposure score of 2.0."""

from __future__ import annotations

from pathlib import Path

from nichealthd.sources.optics import OPTICS_DROPIN, OPTICS_DROPIN_TARGET

from .test_systemd_unit import REPO, directives, dropin_scores, needs_analyze

OPTICS_CONF = REPO / "systemd/examples/optics.conf"


def test_optics_dropin_grants_cap_net_admin_and_nothing_else() -> None:
    """ETHTOOL_MSG_MODULE_EEPROM_GET is GENL_UNS_ADMIN_PERM (net/ethtool/netlink.c): the
    capability must be held in the host's user namespace, so no private one."""
    assert directives(OPTICS_CONF) == {
        ("Service", "PrivateUsers"): ["no"],
        ("Service", "CapabilityBoundingSet"): ["CAP_NET_ADMIN"],
        ("Service", "AmbientCapabilities"): ["CAP_NET_ADMIN"],
    }
    text = OPTICS_CONF.read_text()
    assert OPTICS_DROPIN in text and OPTICS_DROPIN_TARGET in text  # what the log line names


@needs_analyze
def test_optics_dropin_keeps_the_unit_within_the_score(tmp_path: Path) -> None:
    default, with_dropin = dropin_scores(tmp_path, OPTICS_CONF)
    assert default < with_dropin <= 2.0
