"""Run as a script: nichealthctl's answers over D-Bus and over varlink, compared within one
poll of the daemon (tests/dbus/test_ctl_transports.py).

Reads ``{"varlink": SOCKET, "commands": [[ARG, ...], ...], "deadline": SECONDS}`` on
stdin and prints, per command, ``{"command", "same", "one_poll", "dbus": [CODE, OUT, ERR],
"varlink": [...]}``. Both answers and the daemon's poll count before and after them come
from nichealthctl's own ``main`` in this one process. Answers that differ only count when no
poll fell between them (a poll may change a device line, which says nothing about the
transports): such a pair is asked again, until ``deadline``.
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
        one_poll = polls(varlink) == before
        if over_dbus == over_varlink or one_poll or time.monotonic() >= end:
            return {"command": command, "same": over_dbus == over_varlink,
                    "one_poll": one_poll, "dbus": over_dbus, "varlink": over_varlink}


def run() -> None:
    request = json.load(sys.stdin)
    end = time.monotonic() + float(request["deadline"])
    varlink = f"--varlink={request['varlink']}"
    print(json.dumps([pair(varlink, command, end) for command in request["commands"]]))


if __name__ == "__main__":
    run()
