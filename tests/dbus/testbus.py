"""A private system bus for tests and benchmarks: a real dbus-daemon.

Its policy is the stock system bus policy (every method call denied unless a policy file
punches a hole) plus the project's own ``etc/dbus-1/system.d``, so the tests exercise the
policy file that ships. It listens on a socket in a world-readable temp directory so that a
caller running as nobody can connect.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.harness import stop_process

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "etc" / "dbus-1" / "system.d"

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus"
           send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus"
           send_interface="org.freedesktop.DBus.Properties"/>
  </policy>
  <includedir>{policy_dir}</includedir>
</busconfig>
"""


@dataclass
class TestBus:
    """A running dbus-daemon; ``address`` goes into DBUS_SYSTEM_BUS_ADDRESS."""

    __test__ = False  # not a pytest test class

    address: str
    process: subprocess.Popen
    directory: str

    def stop(self) -> None:
        stop_process(self.process, 5)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def policy_for_this_user(policy_dir: Path, directory: str) -> Path:
    """The shipped policy as root; as any other user (the README's ``./run tests`` run by
    a developer or CI's unprivileged stage) a copy in which this user stands in for root, so
    the daemon it starts may own the name and call Reload. Tests of the policy's users
    themselves (root vs nobody) need root and are marked ``root``."""
    if os.geteuid() == 0:
        return policy_dir
    try:
        me = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        me = str(os.geteuid())
    copy = Path(directory) / "system.d"
    copy.mkdir()
    for source in policy_dir.glob("*.conf"):
        text = source.read_text(encoding="utf-8").replace('user="root"', f'user="{me}"')
        (copy / source.name).write_text(text, encoding="utf-8")
    return copy


def start_bus(policy_dir: Path = POLICY_DIR, directory: str = "") -> TestBus:
    """Start a bus; ``directory`` (default: a new temp dir) holds its socket and config."""
    directory = directory or tempfile.mkdtemp(prefix="nichealthd-bus-")
    os.chmod(directory, 0o755)  # nobody must reach the socket
    socket_path = os.path.join(directory, "system_bus_socket")
    config = os.path.join(directory, "system.conf")
    policy_dir = policy_for_this_user(policy_dir, directory)
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(BUS_CONFIG.format(socket=socket_path, policy_dir=policy_dir))
    process = subprocess.Popen(
        ["dbus-daemon", f"--config-file={config}", "--nofork", "--nopidfile",
         "--print-address=1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    address = process.stdout.readline().strip()
    if not address:
        err = process.stderr.read() if process.stderr else ""
        process.kill()
        process.communicate()
        shutil.rmtree(directory, ignore_errors=True)
        raise RuntimeError(f"dbus-daemon did not start: {err}")
    return TestBus(address, process, directory)
