"""D-Bus ``Reload`` with an invalid config on a real dbus-daemon: each is answered
(false, file:line: key: problem), the daemon keeps running and polling on its old config."""

from __future__ import annotations

from typing import Any

from dbushelpers import BusClient, run, wait_polls

from nichealthd.surfaces.dbus_common import from_variants

# appended to the sim's config -> what the reply must say
INVALID: list[tuple[bytes, str]] = [
    (b"pollingInterval = nan\n", "pollingInterval: duration must be a finite number"),
    (b"pollingInterval = {a = 1}\n", "pollingInterval: expected a duration like '1s' or "
                                     "'500ms', got a table"),
    (b'[[counterDetection.counters]]\nname = "link_downed"\nthreshold = inf\n',
     "counterDetection.counters[link_downed].threshold: threshold must be a finite number"),
    (b"outboxMaxEvents = -inf\n", "outboxMaxEvents: expected a whole number"),
    (b"checks = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
    (b"[counterDetection\n", "not valid TOML"),
]


async def reload_and_status() -> tuple[bool, str, dict[str, Any]]:
    async with BusClient() as client:
        reply = await client.call("Reload")
        assert reply.message_type.name == "METHOD_RETURN", reply.body
        status = await client.call("GetStatus")
        return reply.body[0], reply.body[1], from_variants(status.body[0])


def test_reload_over_dbus_rejects_every_invalid_config_and_keeps_polling(daemon: Any) -> None:
    config = daemon.root / "nichealthd.toml"
    original = config.read_bytes()
    for content, expected in INVALID:
        config.write_bytes(original + content)
        accepted, message, status = run(reload_and_status())
        assert accepted is False, message
        assert message.startswith(f"reload rejected, the running configuration is kept: "
                                  f"{config}:"), message
        assert expected in message, message
        assert status["polling_interval"] == 0.2 and status["reload_error"]
        assert daemon.proc.poll() is None, daemon.log()
    wait_polls(3)  # still polling on the old configuration
    config.write_bytes(original)
    accepted, message, status = run(reload_and_status())
    assert accepted is True and status["reload_error"] == "", message
    assert "Traceback" not in daemon.log()
