"""Put the project into a booted container: from source (a wheel) or as the built .deb."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from nspawn import DAEMON_DEPS, SYS_PATH, Container

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = SYS_PATH
    return env


@functools.cache
def wheel() -> Path:
    """Build the project's wheel once per session with Debian's python3 (= the container's)."""
    out = Path(tempfile.mkdtemp(prefix="nichealthd-wheel-"))
    atexit.register(shutil.rmtree, out, True)  # nothing left in /tmp after the session
    src = out / "src"
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.split(b"\0")  # fmt: skip
    for name in filter(None, files):
        rel = name.decode()
        if rel.startswith("packaging/out/") or not (REPO / rel).exists():
            continue
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel, follow_symlinks=False)
    subprocess.run(
        ["python3", "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(src)],
        check=True, capture_output=True, env=_env(),
    )  # fmt: skip
    return next(out.glob("nichealthd-*.whl"))


def install_from_source(c: Container) -> None:
    """The wheel into /usr (Debian layout), plus the unit, sysusers entry, bus policy and
    journal catalog, at the places the .deb puts them; the daemon's user created as the
    package would."""
    subprocess.run(
        ["python3", "-m", "installer", f"--destdir={c.root}", str(wheel())],
        check=True, capture_output=True, env=dict(_env(), DEB_PYTHON_INSTALL_LAYOUT="deb_system"),
    )  # fmt: skip
    copies = {
        "systemd/nichealthd.service": "/usr/lib/systemd/system/nichealthd.service",
        "sysusers.d/nichealthd.conf": "/usr/lib/sysusers.d/nichealthd.conf",
        "etc/dbus-1/system.d/org.nichealthd.NicHealth1.conf":
            "/usr/share/dbus-1/system.d/org.nichealthd.NicHealth1.conf",
        "etc/nichealthd/config.toml": "/etc/nichealthd/config.toml",
        "systemd/nichealthd.catalog": "/usr/lib/systemd/catalog/nichealthd.catalog",
    }  # fmt: skip
    for src, dest in copies.items():
        target = c.path(dest)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / src, target)
    c.run(["systemd-sysusers"])
    c.run(["journalctl", "--update-catalog"])  # what systemd's package trigger does
    c.run(["systemctl", "reload", "dbus"])
    c.run(["systemctl", "daemon-reload"])


def sim_host(c: Container, root: str = "/srv/simhost", profile: str = "dgx-h100") -> str:
    """Build a nichealthd-sim host inside the container (readable by the daemon's user:
    not under /tmp, which PrivateTmp hides, nor under /root, which ProtectHome hides)."""
    c.run(["nichealthd-sim", "create", root, "--profile", profile], timeout=120)
    return root


def start_on_sim_host(c: Container, unit: str = "nichealthd.service") -> str:
    """The daemon's Debian dependencies from apt's pre-fetched cache, the source install, a
    sim DGX-H100 host and the unit started on it; the host's root. A failed start raises
    with the unit's journal."""
    c.run(["apt-get", "install", "-y", "-q", *DAEMON_DEPS], timeout=300)
    install_from_source(c)
    root = sim_host(c)
    point_config_at(c, root)
    try:
        c.run(["systemctl", "start", unit], timeout=90)
    except AssertionError:
        raise AssertionError(c.journal(unit)[-4000:]) from None
    return root


def point_config_at(c: Container, root: str, **extra: str) -> None:
    """Write /etc/nichealthd/config.toml for the sim host; state and event log stay in the
    unit's StateDirectory/LogsDirectory."""
    keys = {
        "sysfsRoot": f"{root}/sys",
        "procRoot": f"{root}/proc",
        "metadataPath": f"{root}/gpu_metadata.json",
        "nodeName": "e2e-node",
        "eventLog": "/var/log/nichealthd/events.jsonl",
        "pollingInterval": "1s",
    }
    keys.update(extra)
    body = "".join(f'{k} = "{v}"\n' for k, v in keys.items())
    c.path("/etc/nichealthd/config.toml").write_text(body)


def built_deb(target: str = "debian12") -> Path:
    """The target's .deb, built once per session (tests/packaging/builds.py: the build the
    packaging tests lint and check, shared when both run in one session)."""
    from tests.packaging.builds import built

    return built(target)
