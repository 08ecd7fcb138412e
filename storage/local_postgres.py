"""A PostgreSQL server of the project's own, for studies that many workers share (`make db`).

One cluster per runs directory (`runs/postgres/`): data, log, a generated password (mode 0600,
never in the repository) and the port it was given. It listens on 127.0.0.1 only, with its Unix
socket inside the cluster directory, and authenticates by password (scram-sha-256). Its URL has
no password: it names a libpq password file beside the cluster (`pgpass`, 0600, its owner's
alone), which libpq reads, so the URL may be shown, passed on command lines and logged. The
binaries are the system's (`scripts/setup_postgres.sh` installs Debian's where missing).
PostgreSQL refuses to run as root, so under root every server command runs as the `postgres`
system user that the package creates, and the cluster directory belongs to it.
"""

from __future__ import annotations

import glob
import grp
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

USER = "autotune"
DATABASE = "autotune"
HOST = "127.0.0.1"
SYSTEM_USER = "postgres"  # who runs the server when we are root
START_TIMEOUT_S = 60


class PostgresError(RuntimeError):
    """The local server cannot be set up or started; the message says what to do."""


def bindir() -> Path:
    """Where initdb and pg_ctl are: `AUTOTUNE_PG_BINDIR`, Debian's versioned directory, or PATH."""
    if env := os.environ.get("AUTOTUNE_PG_BINDIR"):
        return Path(env)
    for found in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True):
        if (Path(found) / "initdb").exists():
            return Path(found)
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    raise PostgresError(
        "PostgreSQL's server binaries (initdb, pg_ctl) are not installed: run "
        "`bash scripts/setup_postgres.sh` (Debian's postgresql package) or set AUTOTUNE_PG_BINDIR"
    )


def _closed_to(user: pwd.struct_passwd, directory: Path) -> Path | None:
    """The first directory on the way to `directory` (itself included) that `user` may not pass
    through, by its mode bits; None when the way is open."""
    groups = {user.pw_gid, *(g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem)}
    for step in [*reversed(directory.parents), directory]:
        st = step.stat()
        bit = stat.S_IXUSR if st.st_uid == user.pw_uid else stat.S_IXGRP if st.st_gid in groups else stat.S_IXOTH
        if not st.st_mode & bit:
            return step
    return None


def _write_secret(path: Path, text: str) -> None:
    """A new file readable by its owner alone from its first byte (no moment at the umask's mode);
    one left by an initialisation that failed is replaced."""
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(text)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LocalPostgres:
    root: Path  # runs/postgres; made absolute, see __post_init__

    def __post_init__(self) -> None:
        # The server's tools run as another user from "/" (`_tool`): a relative path would point
        # there, not into the runs directory it was given as (`make db`'s default `runs`).
        object.__setattr__(self, "root", Path(self.root).absolute())

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    @property
    def _password_file(self) -> Path:
        return self.root / "password"

    @property
    def passfile(self) -> Path:
        """libpq's password file for this server (host:port:database:user:password), 0600."""
        return self.root / "pgpass"

    @property
    def _port_file(self) -> Path:
        return self.root / "port"

    @property
    def initialized(self) -> bool:
        return (self.data / "PG_VERSION").exists()

    @property
    def port(self) -> int:
        return int(self._port_file.read_text())

    def url(self) -> str:
        """The SQLAlchemy URL to pass as STORAGE= / --storage (psycopg 3 driver): no password in
        it, only where libpq finds one (its `passfile` parameter, which SQLAlchemy passes on)."""
        if not self.initialized:
            raise PostgresError(f"no database in {self.root}: run `make db` (autotune db start) first")
        self._write_passfile()
        return (
            f"postgresql+psycopg://{USER}@{HOST}:{self.port}/{DATABASE}?passfile={quote(str(self.passfile), safe='/')}"
        )

    def _write_passfile(self) -> None:
        """The password file libpq reads for this server, any database on it (tests make their
        own), readable by its owner alone: libpq ignores one that others may read."""
        if self.passfile.exists():
            return
        password = self._password_file.read_text().strip()  # URL-safe: no ':' or '\\' to escape
        _write_secret(self.passfile, f"{HOST}:{self.port}:*:{USER}:{password}\n")

    # -- running the server's tools as the right user -------------------------------------------------

    @staticmethod
    def _as_server_user() -> list[str]:
        if os.geteuid() != 0:
            return []
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            raise PostgresError(
                f"running as root, and PostgreSQL will not; no {SYSTEM_USER!r} user to run it "
                f"as: install Debian's postgresql package (scripts/setup_postgres.sh)"
            ) from None
        return ["runuser", "-u", SYSTEM_USER, "--"]

    def _tool(self, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [*self._as_server_user(), str(bindir() / name), *args], capture_output=True, text=True, cwd="/"
        )
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise PostgresError(
                f"{name} failed in {self.root}: {detail[-1] if detail else proc.returncode} (log: {self.log})"
            )
        return proc

    def _check_reachable(self) -> None:
        """Under root, refused before anything is made when the server's user cannot reach the
        cluster (initdb would only say "Permission denied" on the password file)."""
        if os.geteuid() == 0:
            closed = _closed_to(pwd.getpwnam(SYSTEM_USER), self.root.parent)
            if closed is not None:
                raise PostgresError(
                    f"the {SYSTEM_USER!r} user, who runs PostgreSQL for root, cannot enter {closed}, "
                    f"so cannot reach {self.root}: run `autotune db start --runs-dir DIR` with a DIR "
                    f"it can reach, or open the way (chmod o+x {closed})"
                )

    def _hand_over(self) -> None:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(SYSTEM_USER)
            for path in [self.root, *self.root.rglob("*")]:
                os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)

    # -- lifecycle -----------------------------------------------------------------------------------------

    def _init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self._check_reachable()
        _write_secret(self._password_file, secrets.token_urlsafe(24) + "\n")
        self._port_file.write_text(f"{_free_port()}\n")
        self._hand_over()
        self._tool(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            USER,
            f"--pwfile={self._password_file}",
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--no-instructions",
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\n# vllm-autotune: local only\nlisten_addresses = '{HOST}'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.root}'\n"
            )

    def running(self) -> bool:
        return self.initialized and self._tool("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def start(self) -> str:
        """Initialise on first use, start if stopped, create the database; returns the URL."""
        if not self.initialized:
            self._init()
        if not self.running():
            self._tool(
                "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                str(START_TIMEOUT_S),
                "-o",
                f"-p {self.port}",
                "start",
            )
        self._create_database()
        return self.url()

    def stop(self) -> None:
        if self.running():
            self._tool("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def _create_database(self) -> None:
        import psycopg

        password = self._password_file.read_text().strip()
        with psycopg.connect(
            host=HOST, port=self.port, user=USER, password=password, dbname="postgres", autocommit=True
        ) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{DATABASE}"')
