"""Run as a script: nichealthctl's answers over D-Bus and over varlink, each pair from one
poll of the daemon (tests/dbus/test_ctl_transports.py).

Reads ``{"varlink": SOCKET, "commands": [[ARG, ...], ...], "deadline": SECONDS}`` on
stdin and prints, per command, ``{"command", "poll", "dbus": [CODE, OUT, ERR], "varlink":
[...]}``. Both answers and the daemon's poll count before and after them come from
nichealthctl's own ``main`` in this one process, so a pair takes milliseconds, not two
interpreter starts; a pair that spans a poll is asked again (until ``deadline``), so what
is compared never differs only because the host was polled in between.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from typing import Any

from nichealthd.cli.ctl import main


def answer(*argv: str) -> list[Any]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return [code, out.getvalue(), err.getvalue()]


def polls(varlink: str) -> int:
    return int(json.loads(answer(varlink, "status", "--json")[1])["poll_count"])


def pair(varlink: str, command: list[str], end: float) -> dict[str, Any]:
    while True:
        before = polls(varlink)
        over_dbus = answer(*command)
        over_varlink = answer(varlink, *command)
        if polls(varlink) == before or time.monotonic() >= end:
            return {"command": command, "poll": before, "dbus": over_dbus,
                    "varlink": over_varlink, "one_poll": polls(varlink) == before}


def run() -> None:
    request = json.load(sys.stdin)
    end = time.monotonic() + float(request["deadline"])
    varlink = f"--varlink={request['varlink']}"
    print(json.dumps([pair(varlink, command, end) for command in request["commands"]]))


if __name__ == "__main__":
    run()
