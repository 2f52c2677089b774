#!/usr/bin/python3
"""Stand-in for nichealthd that runs inside the shipped unit's sandbox and reports what it can do.

test_e2e_unit_sandbox.py installs systemd/nichealthd.service unchanged except for ExecStart,
which runs this script. It records every access the real daemon needs (and a few it must not
have) in /var/lib/nichealthd/probe.json, owns the daemon's bus name and answers every method
call with "ok" (so the bus policy can be exercised), then speaks sd_notify like the daemon:
READY=1, STATUS=, and WATCHDOG=1 keepalives.
"""

import asyncio
import errno
import json
import os
import socket
import sys

results: dict = {}


def attempt(name, fn):
    try:
        value = fn()
        results[name] = {"ok": True, "value": value}
    except OSError as exc:
        results[name] = {"ok": False, "errno": errno.errorcode.get(exc.errno or 0, str(exc.errno))}
    except Exception as exc:  # record anything
        results[name] = {"ok": False, "error": repr(exc)}


def read(path):
    with open(path) as fh:
        return fh.read()


def write(path):
    with open(path, "w") as fh:
        fh.write("x")
    return oct(os.stat(path).st_mode & 0o777)


def connect_unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    finally:
        s.close()
    return True


def bind_tcp(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("::", port))
        s.listen()
    finally:
        s.close()
    return True


def netlink():
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()  # NETLINK_ROUTE
    return True


def packet():
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close()
    return True


attempt("uid", lambda: os.getuid())
attempt("user", lambda: __import__("pwd").getpwuid(os.getuid()).pw_name)
attempt("proc_net_route", lambda: read("/proc/net/route").splitlines()[0])
attempt("boot_id", lambda: read("/proc/sys/kernel/random/boot_id").strip())
attempt("sys_class_net", lambda: sorted(os.listdir("/sys/class/net")))
attempt("sys_carrier_changes", lambda: read("/sys/class/net/lo/carrier_changes").strip())
attempt("sys_write", lambda: write("/sys/class/net/lo/mtu"))
attempt("gpu_metadata", lambda: json.loads(read("/var/lib/nvsentinel/gpu_metadata.json")))
attempt("config", lambda: len(read("/etc/nichealthd/config.toml")))
attempt("state_dir_write", lambda: write("/var/lib/nichealthd/state.json.tmp"))
attempt("logs_dir_write", lambda: write("/var/log/nichealthd/events.jsonl"))
attempt("etc_write", lambda: write("/etc/nichealthd/probe"))
attempt("var_tmp_write", lambda: write("/var/tmp/probe"))
attempt("home_list", lambda: os.listdir("/root"))
attempt("connector_socket", lambda: connect_unix("/run/nvsentinel/nvsentinel.sock"))
attempt("metrics_bind", lambda: bind_tcp(2112))
attempt("netlink_socket", netlink)
attempt("packet_socket", packet)
attempt("other_pids_visible", lambda: sorted(p for p in os.listdir("/proc") if p.isdigit()))
attempt("dev_list", lambda: sorted(os.listdir("/dev")))


def journal_entries():
    """System journal entries the daemon's user can read (systemd-journal group)."""
    journal = __import__("systemd.journal", fromlist=["Reader"])
    reader = journal.Reader(flags=journal.SYSTEM)
    reader.seek_head()
    count = sum(1 for _ in zip(range(50), reader))
    reader.close()
    return count


attempt("journal_entries", journal_entries)
attempt("dev_kmsg", lambda: os.close(os.open("/dev/kmsg", os.O_RDONLY)))


async def serve():
    from dbus_fast import BusType, Message, MessageType
    from dbus_fast.aio import MessageBus

    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    reply = await bus.request_name("org.nichealthd.NicHealth1")
    results["dbus_request_name"] = {"ok": True, "value": getattr(reply, "value", reply)}

    def handler(msg):
        if msg.message_type == MessageType.METHOD_CALL and msg.path == "/org/nichealthd/NicHealth1":
            return Message.new_method_return(msg, "s", ["ok"])
        return None

    bus.add_message_handler(handler)
    return bus


async def main():
    try:
        bus = await serve()
    except Exception as exc:
        results["dbus_request_name"] = {"ok": False, "error": repr(exc)}
        bus = None
    tmp = "/var/lib/nichealthd/probe.json.tmp"
    with open(tmp, "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=True)
    os.replace(tmp, "/var/lib/nichealthd/probe.json")

    # sd_notify spoken directly (the probe runs without nichealthd installed).
    addr = os.environ["NOTIFY_SOCKET"]
    addr = "\0" + addr[1:] if addr.startswith("@") else addr
    n = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    n.sendto(b"READY=1\nSTATUS=sandbox probe: all checks recorded", addr)
    while True:
        n.sendto(b"WATCHDOG=1", addr)
        await asyncio.sleep(1)
    del bus


if __name__ == "__main__":
    print("sandbox probe starting", file=sys.stderr, flush=True)
    asyncio.run(main())
