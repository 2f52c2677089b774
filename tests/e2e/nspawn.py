"""Real-systemd test harness: cached Debian 12 and 13 rootfs trees booted with systemd-nspawn.

The recipe, proven on these hosts:

* ``debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,python3 bookworm``
  builds the rootfs ONCE per machine (cache under ``$NICHEALTHD_ROOTFS_CACHE``, default
  ``/var/tmp/nichealthd-rootfs``); a cache key derived from the package lists makes a
  changed list rebuild it. A file lock serialises concurrent builders.
* Two flavours are cached: ``base`` (minbase + systemd + dbus + python3, with the
  daemon's Debian dependencies *downloaded only* into apt's archive cache, so that
  ``apt-get install ./nichealthd_*.deb`` resolves them from Debian's index without
  pip and without depending on the network at test time) and ``deps`` (``base`` with
  those dependencies installed, for the source-install test).
* Debian 13 (trixie) flavours: ``trixie`` (as ``base``: minbase + systemd + dbus + python3,
  the daemon's dependencies downloaded only) and ``trixie-build`` (``trixie`` with trixie's
  debhelper, dh-python and lintian installed, to build and lint the .deb with the tools of
  the release it targets). They are
  cached beside the bookworm ones in ``<cache>-trixie`` (a harness of an older checkout
  removes the trees it does not know from its own cache directory).
* Newcomer flavours ``newcomer-bookworm`` and ``newcomer-trixie``: what the README's "Try it"
  asks a user to install and nothing else (minbase + python3, python3-venv, dbus, git; no
  systemd), run without booting (:meth:`Container.execute`) to rehearse its two commands
  (tests/e2e/newcomer.py). Cached in ``<cache>-newcomer``, apart from the trees older
  checkouts prune by their own lists.
* Every test boots a throw-away copy of a flavour. ``systemd-nspawn`` is started from
  a tiny shell that first moves itself into its own cgroup in both the named systemd
  v1 hierarchy and the unified one (the host runs cgroup v1 "hybrid"), so the container's
  systemd gets a subtree of its own and the test process is never captured.
* Each container has a private network namespace (``--private-network``: loopback only),
  so what it binds (the daemon's ``:2112``) never collides with the host or another test;
  nothing at test time needs the network (apt resolves from the pre-fetched archive cache).
* The container is driven with ``nsenter -t <container pid 1> -a CMD``; teardown always
  runs (poweroff, then SIGTERM/SIGKILL of nspawn, cgroup removal, rootfs copy deletion).

Run ``python3 tests/e2e/nspawn.py build`` to prebuild the cache (CI does this once before
pytest), ``python3 tests/e2e/nspawn.py shell`` to boot a copy and get a shell in it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator, Optional, Sequence

SUITE = "bookworm"
# Debian 13's packaging tools: packaging/build-deb.sh and its lintian run inside trixie.
TRIXIE_BUILD = ("build-essential", "lintian", "debhelper", "dh-python",
                "pybuild-plugin-pyproject", "python3-all", "python3-setuptools", "python3-wheel",
                "dpkg-dev", "fakeroot")  # fmt: skip
# flavour -> (Debian suite, built from, packages installed on top of it)
FLAVOURS = {
    "base": ("bookworm", None, ()),
    "deps": ("bookworm", "base", "DAEMON_DEPS"),
    "trixie": ("trixie", None, ()),
    "trixie-build": ("trixie", "trixie", TRIXIE_BUILD),
    "newcomer-bookworm": ("bookworm", None, ()),
    "newcomer-trixie": ("trixie", None, ()),
}
# The README's "Try it" promises that a fresh Debian with these packages is enough (git to
# clone); the newcomer flavours have exactly them, and no systemd.
NEWCOMER_INCLUDE = ["python3", "python3-venv", "dbus", "git"]
MIRROR = os.environ.get("NICHEALTHD_DEBIAN_MIRROR", "http://deb.debian.org/debian")
CACHE_ROOT = Path(os.environ.get("NICHEALTHD_ROOTFS_CACHE", "/var/tmp/nichealthd-rootfs"))
BASE_INCLUDE = ["systemd", "systemd-sysv", "dbus", "python3"]
# The daemon's runtime dependencies as Debian ships them (packaging/deb/control Depends and
# Recommends). python3-tomli is not needed: bookworm's python3 is 3.11 (tomllib). procps
# provides /bin/kill for the unit's ExecReload= (minbase does not include it).
DAEMON_DEPS = [
    "procps",
    "python3-dbus-fast",
    "python3-sdnotify",
    "python3-grpcio",
    "python3-protobuf",
    "python3-pystemd",
    "python3-systemd",  # the journal reader (Recommends)
]
SYS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
CGROUP_V1 = Path("/sys/fs/cgroup/systemd")
CGROUP_V2 = Path("/sys/fs/cgroup/unified")


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = SYS_PATH
    env["DEBIAN_FRONTEND"] = "noninteractive"
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def _chroot_env() -> dict:
    """The environment of a command that runs inside a rootfs (debootstrap's second stage,
    ``chroot``): nothing of the host's. A host's ``TMPDIR`` (CI sets one below its own work
    directory) does not exist in the tree, and a maintainer script's ``mktemp`` fails on it:
    trixie's ca-certificates postinst did, failing the build flavour."""
    return {"PATH": SYS_PATH, "LANG": "C.UTF-8", "HOME": "/root",
            "DEBIAN_FRONTEND": "noninteractive"}


def _run(cmd: Sequence[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("check", True)
    kw.setdefault("env", _env())
    return subprocess.run(list(cmd), **kw)


def missing_tools() -> list:
    """Host tools the harness needs that are not installed (empty list: all present)."""
    need = ["debootstrap", "systemd-nspawn", "nsenter", "chroot"]
    return [t for t in need if shutil.which(t, path=SYS_PATH) is None]


def unusable_reason() -> Optional[str]:
    """Why this host cannot run the harness, or None when it can."""
    if os.geteuid() != 0:
        return "real-systemd tests need root (debootstrap, systemd-nspawn)"
    missing = missing_tools()
    if missing:
        return "missing host tools: " + ", ".join(missing) + " (run .ci/system-deps.sh)"
    if (
        not (CGROUP_V1 / "cgroup.procs").exists()
        and not Path("/sys/fs/cgroup/cgroup.procs").exists()
    ):
        return "no usable cgroup hierarchy under /sys/fs/cgroup"
    return None


def suite_of(flavour: str) -> str:
    return FLAVOURS[flavour][0]


def is_newcomer(flavour: str) -> bool:
    return flavour.startswith("newcomer-")


def _cache_dir(flavour: str) -> Path:
    if is_newcomer(flavour):
        return CACHE_ROOT.with_name(f"{CACHE_ROOT.name}-newcomer")
    suite = suite_of(flavour)
    return CACHE_ROOT if suite == SUITE else CACHE_ROOT.with_name(f"{CACHE_ROOT.name}-{suite}")


def _include(flavour: str) -> list:
    """The packages debootstrap installs in a flavour built from scratch."""
    return list(NEWCOMER_INCLUDE) if is_newcomer(flavour) else list(BASE_INCLUDE)


def _extra(flavour: str) -> list:
    extra = FLAVOURS[flavour][2]
    return list(DAEMON_DEPS) if extra == "DAEMON_DEPS" else list(extra)


def _key(flavour: str) -> str:
    suite = suite_of(flavour)
    if is_newcomer(flavour):
        text = "|".join([suite, MIRROR, ",".join(NEWCOMER_INCLUDE), "v1"])
        return f"{flavour}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    text = "|".join([suite, MIRROR, ",".join(BASE_INCLUDE), ",".join(DAEMON_DEPS), "v2"])
    if suite != SUITE:
        text += "|" + ",".join(_extra(flavour))
    # The first two (bookworm) keep the key of earlier checkouts: one shared cache.
    name = flavour if suite == SUITE else flavour.replace(f"{suite}-", "").replace(suite, "base")
    return f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CACHE_ROOT / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _chroot(root: Path, *cmd: str, **kw) -> None:
    _run(["chroot", str(root), *cmd], env=_chroot_env(), **kw)


def _finish_rootfs(root: Path, suite: str) -> None:
    """Make a fresh debootstrap tree boot cleanly and quietly under nspawn."""
    (root / "etc/hostname").write_text("nichealthd-e2e\n")
    # An empty machine-id makes systemd generate a transient one at each boot.
    (root / "etc/machine-id").write_text("")
    # No getty/console noise, no network management inside the container.
    for unit in ("getty@tty1.service", "console-getty.service"):
        link = root / "etc/systemd/system" / unit
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/dev/null")
    (root / "etc/apt/sources.list").write_text(f"deb {MIRROR} {suite} main\n")
    # trixie's debootstrap writes deb822 sources too; one source of packages is enough.
    with contextlib.suppress(FileNotFoundError):
        (root / "etc/apt/sources.list.d/debian.sources").unlink()
    # Keep downloaded .debs: the base flavour ships the daemon's dependencies pre-fetched.
    (root / "etc/apt/apt.conf.d/99nichealthd-keep-debs").write_text(
        'Binary::apt::APT::Keep-Downloaded-Packages "true";\n'
        'APT::Keep-Downloaded-Packages "true";\n'
    )
    (root / "etc/apt/apt.conf.d/99nichealthd-no-recommends").write_text(
        'APT::Install-Recommends "false";\n'
    )


def _build_base(dest: Path, flavour: str) -> None:
    suite = suite_of(flavour)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            "--include=" + ",".join(_include(flavour)),
            suite,
            str(tmp),
            MIRROR,
        ],
        stdout=subprocess.DEVNULL,
        env=_chroot_env(),
    )
    _finish_rootfs(tmp, suite)
    if not is_newcomer(flavour):  # a newcomer's machine has nothing of the daemon's
        with _chroot_mounts(tmp):
            _chroot(tmp, "apt-get", "update", "-qq")
            _chroot(tmp, "apt-get", "install", "-y", "-qq", "--download-only", *DAEMON_DEPS)
    os.replace(tmp, dest)


def _build_deps(base: Path, dest: Path, packages: Sequence[str]) -> None:
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _run(["cp", "-a", "--reflink=auto", str(base), str(tmp)])
    with _chroot_mounts(tmp):
        _chroot(tmp, "apt-get", "install", "-y", "-qq", *packages, stdout=subprocess.DEVNULL)
    os.replace(tmp, dest)


@contextlib.contextmanager
def _chroot_mounts(root: Path) -> Iterator[None]:
    mounts = []
    try:
        for src, fstype in (("/proc", "proc"), ("/dev", None), ("/sys", "sysfs")):
            target = root / src.lstrip("/")
            target.mkdir(exist_ok=True)
            if fstype:
                _run(["mount", "-t", fstype, fstype, str(target)])
            else:
                _run(["mount", "--bind", src, str(target)])
            mounts.append(target)
        resolv = root / "etc/resolv.conf"
        if Path("/etc/resolv.conf").exists():
            with contextlib.suppress(FileNotFoundError):
                resolv.unlink()
            shutil.copy("/etc/resolv.conf", resolv)
        # Never start services inside the chroot.
        policy = root / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        yield
    finally:
        for target in reversed(mounts):
            _run(["umount", "-l", str(target)], check=False)
        with contextlib.suppress(FileNotFoundError):
            (root / "usr/sbin/policy-rc.d").unlink()


def ensure_rootfs(flavour: str = "base") -> Path:
    """Return the cached rootfs of FLAVOUR (see FLAVOURS), building it if needed."""
    if flavour not in FLAVOURS:
        raise ValueError(flavour)
    parent = FLAVOURS[flavour][1]
    cache = _cache_dir(flavour)
    with _lock():
        cache.mkdir(parents=True, exist_ok=True)
        current = {_key(f) for f in FLAVOURS if _cache_dir(f) == cache}
        for stale in cache.iterdir():  # rootfs trees of older package lists
            if stale.is_dir() and stale.name not in current:
                _run(["rm", "-rf", "--one-file-system", str(stale)], check=False)
        dest = cache / _key(flavour)
        if dest.is_dir():
            return dest
        if parent is None:
            _build_base(dest, flavour)
            return dest
    base = ensure_rootfs(parent)
    with _lock():
        if not dest.is_dir():
            _build_deps(base, dest, _extra(flavour))
    return dest


def _cgroup_dirs(name: str) -> list:
    dirs = []
    if (CGROUP_V1 / "cgroup.procs").exists():
        dirs.append(CGROUP_V1 / name)
    if (CGROUP_V2 / "cgroup.procs").exists():
        dirs.append(CGROUP_V2 / name)
    elif Path("/sys/fs/cgroup/cgroup.procs").exists() and not dirs:
        dirs.append(Path("/sys/fs/cgroup") / name)  # pure cgroup v2 host
    return dirs


def _children(pid: int) -> list:
    out: list = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text()
                out.extend(int(x) for x in text.split())
    return out


class Container:
    """One booted throw-away copy of a cached rootfs."""

    def __init__(self, flavour: str = "base", workdir: Optional[Path] = None,
                 nspawn_args: Sequence[str] = ()) -> None:
        self.flavour = flavour
        self.nspawn_args = tuple(nspawn_args)  # more systemd-nspawn options (--bind-ro=...)
        self.name = f"nichealthd-e2e-{uuid.uuid4().hex[:8]}"
        parent = workdir or Path(os.environ.get("NICHEALTHD_E2E_WORKDIR", "/var/tmp"))
        self.root = parent / self.name
        self.proc: Optional[subprocess.Popen] = None
        self.leader: Optional[int] = None
        self.log_path = parent / (self.name + ".console.log")
        self._cgroups = _cgroup_dirs(self.name)

    # -- lifecycle -------------------------------------------------------------------------
    def _nspawn_script(self, options: Sequence[str], args: Sequence[str]) -> str:
        """Copy the flavour's rootfs to :attr:`root` and return the shell line that moves
        itself into the test's cgroups and execs systemd-nspawn on it with ``options``
        (quoted ``args`` after them): what :meth:`start` and :meth:`execute` share."""
        src = ensure_rootfs(self.flavour)
        _run(["cp", "-a", "--reflink=auto", str(src), str(self.root)])
        for d in self._cgroups:
            d.mkdir(exist_ok=True)
        enter = "".join(f'echo $$ > "{d}/cgroup.procs" && ' for d in self._cgroups)
        return (
            f"{enter}exec systemd-nspawn -q -D {self.root} {' '.join(options)} --register=no "
            f"--keep-unit --machine={self.name[:64]}"
            + "".join(f" {shlex.quote(arg)}" for arg in args)
        )

    def start(self, boot_timeout: float = 90.0) -> Container:
        script = self._nspawn_script(
            ["-b", "--console=passive", "--private-network"], self.nspawn_args)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                ["sh", "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_env(),
                start_new_session=True,
            )
        deadline = time.monotonic() + boot_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited early:\n{self.console_log()}")
            self.leader = self._find_leader()
            if self.leader:
                break
            time.sleep(0.1)
        if not self.leader:
            raise RuntimeError("container init did not appear:\n" + self.console_log())
        # systemctl cannot talk to PID 1 until it has created its private bus socket.
        while time.monotonic() < deadline:
            probe = self.run(["test", "-S", "/run/systemd/private"], check=False)
            if probe.returncode == 0:
                break
            time.sleep(0.1)
        remaining = max(5.0, deadline - time.monotonic())
        state = self.run(
            ["systemctl", "is-system-running", "--wait"], check=False, timeout=remaining
        )
        if state.stdout.strip() not in ("running", "degraded"):
            raise RuntimeError(
                f"container did not boot: {state.stdout!r} {state.stderr!r}\n{self.console_log()}"
            )
        return self

    def execute(self, argv: Sequence[str], timeout: float) -> int:
        """Run ARGV as root in a throw-away copy of the flavour without booting it (the
        newcomer flavours have no systemd), on the host's network (pip reaches the registry),
        its output on ours through pipes, as in CI (no terminal, no colours); returns its exit
        status (124 past ``timeout``). Everything is removed afterwards, as by :meth:`stop`."""
        script = self._nspawn_script(
            ["--as-pid2", "--console=pipe"], (*self.nspawn_args, "--", *argv))
        try:
            self.proc = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL,
                                         env=_env(), start_new_session=True)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"nspawn: {' '.join(argv)} still running after {timeout:g} s: killed",
                      flush=True)
                self._kill_cgroups()
                self.proc.wait(15)
                return 124
        finally:
            self.stop()

    def _find_leader(self) -> Optional[int]:
        """PID (host namespace) of the container's systemd: the first descendant named systemd."""
        assert self.proc is not None
        todo = [self.proc.pid]
        while todo:
            pid = todo.pop()
            for child in _children(pid):
                try:
                    comm = Path(f"/proc/{child}/comm").read_text().strip()
                except OSError:
                    continue
                if comm == "systemd":
                    return child
                todo.append(child)
        return None

    def stop(self) -> None:
        """Power the container off and remove everything it left (always safe to call)."""
        if self.proc is not None and self.proc.poll() is None:
            if self.leader:
                with contextlib.suppress(Exception):
                    self.run(["systemctl", "poweroff", "--no-block"], check=False, timeout=10)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self._kill_cgroups()
                    self.proc.wait(timeout=15)
        self._kill_cgroups()
        for d in self._cgroups:
            for _ in range(50):
                try:
                    _rmdir_tree(d)
                    break
                except OSError:
                    time.sleep(0.1)
        if not os.environ.get("NICHEALTHD_E2E_KEEP"):
            if self.root.exists():
                _run(["rm", "-rf", "--one-file-system", str(self.root)], check=False)
            with contextlib.suppress(FileNotFoundError):
                self.log_path.unlink()

    def _kill_cgroups(self) -> None:
        for d in self._cgroups:
            if not d.exists():
                continue
            for procs in d.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    for line in procs.read_text().split():
                        with contextlib.suppress(ProcessLookupError, ValueError):
                            os.kill(int(line), signal.SIGKILL)

    def __enter__(self) -> Container:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- driving ---------------------------------------------------------------------------
    def run(
        self,
        cmd: Sequence[str],
        check: bool = True,
        timeout: float = 60.0,
        input: Optional[str] = None,
    ) -> subprocess.CompletedProcess:
        """Run CMD inside every namespace of the container, as root, with a clean env."""
        assert self.leader
        env = {
            "PATH": SYS_PATH,
            "LANG": "C.UTF-8",
            "DEBIAN_FRONTEND": "noninteractive",
            "SYSTEMD_PAGER": "",
            "SYSTEMD_COLORS": "0",
        }
        full = ["nsenter", "-t", str(self.leader), "-a", "env", "-i"]
        full += [f"{k}={v}" for k, v in env.items()] + list(cmd)
        res = subprocess.run(
            full,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_env(),
        )
        if check and res.returncode != 0:
            raise AssertionError(
                f"{' '.join(cmd)} exited {res.returncode}\nstdout:\n{res.stdout}\n"
                f"stderr:\n{res.stderr}"
            )
        return res

    def sh(self, script: str, check: bool = True, timeout: float = 60.0):
        return self.run(["sh", "-c", script], check=check, timeout=timeout)

    def path(self, inside: str) -> Path:
        """Host path of a path inside the container's root."""
        return self.root / inside.lstrip("/")

    def show(self, unit: str, prop: str) -> str:
        return self.run(["systemctl", "show", "-P", prop, unit]).stdout.strip()

    def wait_for(self, predicate, timeout: float, interval: float = 0.2, what: str = ""):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")

    def journal(self, unit: str) -> str:
        return self.run(["journalctl", "-u", unit, "--no-pager", "-o", "cat"], check=False).stdout

    def console_log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


def _rmdir_tree(d: Path) -> None:
    if not d.exists():
        return
    for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        sub.rmdir()
    d.rmdir()


def main(argv: Sequence[str]) -> int:
    cmd = argv[0] if argv else "build"
    reason = unusable_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    if cmd == "build":
        for flavour in argv[1:] or ("base", "deps"):
            t0 = time.monotonic()
            path = ensure_rootfs(flavour)
            print(f"{flavour}: {path} ({time.monotonic() - t0:.0f}s)")
        return 0
    if cmd == "shell":
        with Container(argv[1] if len(argv) > 1 else "base") as c:
            print(f"booted {c.name}, leader pid {c.leader}; exit the shell to power off")
            subprocess.call(["nsenter", "-t", str(c.leader), "-a", "bash", "-l"], env=_env())
        return 0
    flavours = ", ".join(FLAVOURS)
    print(f"usage: nspawn.py [build [FLAVOUR...] | shell [FLAVOUR]]; flavours: {flavours}",
          file=sys.stderr)  # fmt: skip
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
