"""The shipped policy file, enforced by a real dbus-daemon: anyone reads, only root changes,
only root (and the user nichealthd) may own the name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from dbushelpers import busctl, ctl, source_for

from tests.harness import NOBODY

# Acts as root and as user nobody (setpriv): CI runs these in its root stage.
pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0,
                                 reason="acts as root and as nobody (setpriv): needs root")]

NAME = "org.nichealthd.NicHealth1"
PATH = "/org/nichealthd/NicHealth1"


def test_nobody_can_list_introspect_ping_and_get_properties(daemon: Any) -> None:
    for args in (("call", NAME, PATH, NAME, "ListPorts"),
                 ("call", NAME, PATH, NAME, "ListDevices"),
                 ("call", NAME, PATH, NAME, "ListCounters", "su", "", "0"),
                 ("call", NAME, PATH, NAME, "ListEvents", "u", "2"),
                 ("call", NAME, PATH, NAME, "GetStatus"),
                 ("call", NAME, PATH, "org.freedesktop.DBus.Peer", "Ping"),
                 ("introspect", NAME, PATH),
                 ("get-property", NAME, PATH, NAME, "Health"),
                 ("call", NAME, PATH, "org.freedesktop.DBus.Properties", "GetAll", "s", NAME)):
        out = busctl(*args, user=NOBODY)
        assert out.returncode == 0, (args, out.stderr)


def test_nobody_gets_access_denied_on_reload_and_set(daemon: Any) -> None:
    out = busctl("call", NAME, PATH, NAME, "Reload", user=NOBODY)
    assert out.returncode != 0 and "Access denied" in out.stderr, out.stderr
    out = busctl("set-property", NAME, PATH, NAME, "Health", "s", "healthy", user=NOBODY)
    assert out.returncode != 0 and "Access denied" in out.stderr
    assert busctl("call", NAME, PATH, NAME, "Reload").returncode == 0  # root may


def test_nobody_cannot_own_the_name_root_can_try(system_bus: Any) -> None:
    script = (
        "import asyncio, sys\n"
        "from nichealthd.surfaces.dbus_common import BusType, MessageBus, NameFlag\n"
        "async def main():\n"
        "    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()\n"
        "    try:\n"
        "        reply = await bus.request_name(sys.argv[1], NameFlag.DO_NOT_QUEUE)\n"
        "        print('REPLY', reply.name)\n"
        "    except Exception as exc:\n"
        "        print('ERROR', getattr(exc, 'type', type(exc).__name__))\n"
        "asyncio.run(main())\n")
    def own(user: list[str]) -> str:
        source = source_for(user)
        env = dict(os.environ, PYTHONPATH=str(source))
        return subprocess.run([*user, sys.executable, "-c", script, NAME], cwd=source, env=env,
                              capture_output=True, text=True, timeout=30).stdout.strip()

    assert own(NOBODY) == "ERROR org.freedesktop.DBus.Error.AccessDenied"
    assert own([]) == "REPLY PRIMARY_OWNER"


def test_nichealthctl_works_for_nobody_and_explains_denials(daemon: Any) -> None:
    out = ctl("show", "ports", "--json", user=NOBODY)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)
    out = ctl("check", user=NOBODY)
    assert out.returncode == 0 and out.stdout.startswith("NICHEALTH OK")
    out = ctl("status", user=NOBODY)
    assert out.returncode == 0, out.stderr
