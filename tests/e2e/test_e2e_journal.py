"""The events in the journal under real systemd 257 (a Debian 13 container): a pulled cable is
an entry with fields, ``journalctl NICHEALTHD_DEVICE=`` lists that card's events, and
``journalctl -x -u nichealthd`` prints the catalog entry under it.

nichealthd is installed from source with the journal catalog (compiled by ``journalctl
--update-catalog``, as systemd's package trigger does) and started with systemctl on a
nichealthd-sim DGX-H100 host; the cable of mlx5_5 port 1 is pulled with ``nichealthd-sim
uncable``.
"""

from __future__ import annotations

import json

import pytest
from install import start_on_sim_host

pytestmark = pytest.mark.e2e

UNIT = "nichealthd.service"


def test_a_pulled_cable_in_the_journal_with_fields_and_the_catalog(boot) -> None:
    c = boot("trixie")
    root = start_on_sim_host(c, UNIT)
    c.wait_for(lambda: "event" in c.journal(UNIT) or "healthy events committed"
               in c.journal(UNIT), 60, what="the first poll's events")
    c.run(["nichealthd-sim", "uncable", root, "mlx5_5", "1"])

    def entries(*match: str) -> list:
        out = c.run(["journalctl", "-o", "json", "--no-pager", *match], check=False).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    pulled = c.wait_for(lambda: [e for e in entries("NICHEALTHD_DEVICE=mlx5_5")
                                 if e.get("NICHEALTHD_SEVERITY") != "healthy"], 60,
                        what="the pulled cable's entry")
    first = pulled[0]
    assert first["_SYSTEMD_UNIT"] == UNIT and first["NICHEALTHD_PORT"] == "1"
    assert first["MESSAGE"].startswith("event ") and "mlx5_5" in first["MESSAGE"]
    assert first["MESSAGE_ID"] == "e4d1236323b445e7b615159f07bf4f98"  # port_state
    assert {e["NICHEALTHD_DEVICE"] for e in entries("NICHEALTHD_DEVICE=mlx5_5")} == {"mlx5_5"}
    assert all("mlx5_5" not in e["MESSAGE"] for e in entries("NICHEALTHD_DEVICE=mlx5_0"))

    explained = c.run(["journalctl", "-x", "-u", UNIT, "--no-pager"]).stdout
    shown = explained[explained.index(first["MESSAGE"]):]
    assert "Subject: A NIC port's link state: " in shown and "What to do:" in shown, shown[:2000]
    c.run(["systemctl", "stop", UNIT], timeout=60)
