"""Rehearse the README's "Try it" as a newcomer: its first two commands, copied literally from
the README, run as an unprivileged user in fresh Debian 12 and 13 containers that have only
what the README asks for (python3, python3-venv, dbus; git to clone: nspawn.py's newcomer
flavours), with the Debian default ``ulimit -n 1024``, a 64 MiB /dev/shm and a small /tmp
(tmpfs, as container runtimes give them). Run as root by .ci/run:

    python3 tests/e2e/newcomer.py SRC [FLAVOUR...]

SRC is the clone to hand the newcomer (CI's copy of the tracked files); FLAVOUR defaults to
newcomer-bookworm and newcomer-trixie. Exit status 0 when every command succeeded in every
container. The containers share the host's network: pip installs from the registry (trusting
the CA bundle of the host's PIP_CERT, where it sets one: :func:`registry_ca`).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import nspawn  # noqa: E402

FLAVOURS = ("newcomer-bookworm", "newcomer-trixie")
USER = "newcomer"
DEV_SHM = "size=64m"  # Docker's and Podman's default /dev/shm
TMP = "size=1g,nr_inodes=200k"  # half the 409,600 inodes the suite once ran out of
TIMEOUT = 20 * 60.0  # pip installs, the demo and the suite (10 minutes on 2 cores), with room


def readme_commands(readme: Path, count: int = 2) -> List[str]:
    """The first ``count`` commands of the README's "## Try it" section: its indented lines."""
    section = re.search(r"^## Try it\n(.*?)^## ", readme.read_text(), re.M | re.S)
    if section is None:
        raise SystemExit(f"{readme}: no '## Try it' section")
    commands = re.findall(r"^ {4}(\S.*)$", section.group(1), re.M)
    if len(commands) < count:
        raise SystemExit(f"{readme}: '## Try it' has {len(commands)} commands, not {count}")
    return commands[:count]


CA_INSIDE = "/etc/nichealthd-registry-ca.pem"


def registry_ca() -> Optional[str]:
    """The CA bundle this host's pip is told to trust (PIP_CERT), if any: behind a proxy that
    re-signs TLS, the container reaches the registry only with it. Unset on a machine with
    plain internet access, where the newcomer's pip uses its own certifi bundle."""
    cert = os.environ.get("PIP_CERT")
    return cert if cert and os.path.isfile(cert) else None


def script(commands: Sequence[str], ca: bool = False) -> str:
    """What runs in the container as root: make the user, hand them the clone, and run each
    command as them in a login-like environment (plus PIP_CERT where the host's registry
    needs its CA: :func:`registry_ca`); prints one verdict line per command."""
    home = f"/home/{USER}"
    env = (f"env -i HOME={home} USER={USER} LOGNAME={USER} SHELL=/bin/bash LANG=C.UTF-8 "
           "PATH=/usr/local/bin:/usr/bin:/bin" + (f" PIP_CERT={CA_INSIDE}" if ca else ""))
    lines = [
        "set -u",
        f"useradd --create-home --shell /bin/bash {USER}",
        f"cp -a /mnt/src {home}/nichealthd && chown -R {USER}:{USER} {home}/nichealthd",
        "echo \"newcomer: $(. /etc/os-release; echo $PRETTY_NAME), python3 $(python3 -c "
        "'import platform; print(platform.python_version())'), ulimit -n $(ulimit -n), "
        "$(df -h --output=target,size /dev/shm /tmp | tail -n +2 | tr -s ' ' | paste -sd,)\"",
        "failed=0",
    ]
    for command in commands:
        run = (f"setpriv --reuid={USER} --regid={USER} --init-groups {env} "
               f"bash -c {shlex.quote(f'cd ~/nichealthd && {command}')}")
        lines += [
            f"printf '\\n$ %s\\n' {shlex.quote(command)}",
            "start=$(date +%s)",
            f"{run}; rc=$?",
            f"echo \"newcomer: {command} -> exit status $rc after $(( $(date +%s) - start ))s\"",
            '[ "$rc" = 0 ] || failed=1',
        ]
    lines.append('exit "$failed"')
    return "\n".join(lines)


def rehearse(src: Path, flavour: str, commands: Sequence[str]) -> int:
    ca = registry_ca()
    container = nspawn.Container(flavour, nspawn_args=(
        f"--bind-ro={src}:/mnt/src",
        f"--tmpfs=/dev/shm:mode=1777,{DEV_SHM}",
        f"--tmpfs=/tmp:mode=1777,{TMP}",
        "--rlimit=RLIMIT_NOFILE=1024:524288",  # Debian's default soft limit
        *([f"--bind-ro={ca}:{CA_INSIDE}"] if ca else []),
    ))
    return container.execute(["sh", "-c", script(commands, ca=ca is not None)], TIMEOUT)


def main(argv: Sequence[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    src = Path(argv[0]).resolve()
    flavours = list(argv[1:]) or list(FLAVOURS)
    reason = nspawn.unusable_reason()
    if reason:
        print(f"newcomer: cannot run containers here: {reason}", file=sys.stderr)
        return 1
    commands = readme_commands(src / "README.md")
    failed = []
    for flavour in flavours:
        print(f"\n=== newcomer: {flavour}: {' ; '.join(commands)}", flush=True)
        start = time.monotonic()
        rc = rehearse(src, flavour, commands)
        print(f"=== newcomer: {flavour}: exit status {rc} after "
              f"{time.monotonic() - start:.0f}s", flush=True)
        if rc != 0:
            failed.append(flavour)
    if failed:
        print(f"newcomer: failed in {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))
