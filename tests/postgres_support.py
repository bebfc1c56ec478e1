"""A real PostgreSQL for the memory store's tests: Debian's `postgresql`, installed with apt-get
when it is missing (as the console tests install chromium), a throwaway cluster in a temporary
directory on a free port, trusted on loopback. The fixture is in conftest.py."""

from __future__ import annotations

import fcntl
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.devserver import free_port


def postgres_bin() -> Path:
    """The directory of `initdb` and `pg_ctl`, installing Debian's postgresql if need be."""
    found = _installed()
    if found is not None:
        return found
    apt = shutil.which("apt-get")
    if apt is None:
        pytest.skip("PostgreSQL is not installed and there is no apt-get to install it with")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=300"]
    with open(Path(tempfile.gettempdir()) / "react-agent-postgresql.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        for command in ([apt, *lock, "update"], [apt, *lock, "install", "-y", "postgresql"]):
            if _installed() is not None:
                break
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode != 0 and _installed() is None:
                pytest.skip(f"PostgreSQL could not be installed: `{' '.join(command)}` failed "
                            f"({done.returncode}): {(done.stderr or done.stdout)[-1000:]}")
    found = _installed()
    if found is None:
        pytest.skip("apt-get installed postgresql, but no initdb is to be found")
    return found


def _installed() -> Path | None:
    for initdb in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True):
        return Path(initdb).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@contextmanager
def running_postgres() -> Iterator[str]:
    """A fresh cluster, running; yields its URL. PostgreSQL refuses to run as root, so as root
    it runs as the `postgres` user the package made."""
    bindir = postgres_bin()
    base = Path(tempfile.mkdtemp(prefix="agent-pg-"))
    data, sockets = base / "data", base / "sockets"
    sockets.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root, and there is no postgres user to run PostgreSQL as")
        for path in (base, sockets):
            os.chown(path, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    log = base / "postgres.log"

    def run(*command: str, timeout: float = 120) -> None:
        done = subprocess.run([*as_user, *command], capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr or done.stdout}")

    run(str(bindir / "initdb"), "-D", str(data), "-U", "agent", "--auth=trust",
        "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
    run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
        f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off "
        "-c synchronous_commit=off -c full_page_writes=off", "start")
    try:
        url = f"postgresql://agent@127.0.0.1:{port}/postgres"
        _wait_ready(url)
        yield url
    finally:
        run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)


def _wait_ready(url: str, timeout_s: float = 30) -> None:
    import psycopg

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
