"""A real PostgreSQL for the memory store's tests: Debian's `postgresql` (`make system-deps`), a
throwaway cluster in a temporary directory on a free port, trusted on loopback. The fixture is in
conftest.py."""

from __future__ import annotations

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
    """The directory of `initdb` and `pg_ctl` of Debian's postgresql, which `make system-deps`
    installs (`make test` and .ci/run call it); no test installs a system package."""
    found = _installed()
    if found is None:
        pytest.fail("PostgreSQL is missing: run `make system-deps` (or apt-get install postgresql)")
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
