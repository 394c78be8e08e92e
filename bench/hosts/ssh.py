"""SSHTransport: the Transport of bench.hosts.transport over SSH (fabric on paramiko).

The only module that imports fabric or paramiko. Rules it enforces:

- host keys are verified against the host's known_hosts file (inventory `ssh.known_hosts`,
  default ~/.ssh/known_hosts) with a reject policy, for the host and for every ProxyJump hop;
  nothing is ever added silently. An unknown key is a HostKeyError whose hint is
  `bench hosts trust HOST`, which fetches the key, shows its SHA256 fingerprint and appends
  it only after --yes or an interactive confirmation (`fetch_host_key`, `append_known_host`).
- every command is an argv, quoted element by element by bench.hosts.transport.quote_argv; an
  environment is passed as `env -- K=V argv...` (quoted too), never through the server's
  AcceptEnv and never pasted into a shell string.
- ~/.ssh/config (or inventory `ssh.config`) is honoured by fabric for keys, ProxyJump and
  ProxyCommand; the inventory's identity file and proxy_jump come first.
- paramiko's connect, banner and auth timeouts come from the inventory; a command's timeout
  is CommandTimeout. Connection problems are Unreachable, refused credentials AuthError.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import paramiko
from fabric import Config, Connection
from invoke.exceptions import CommandTimedOut

from bench.errors import (AuthError, CommandFailed, CommandTimeout, HostError, HostKeyError,
                          InputError, Unreachable)
from bench.hosts.inventory import Host
from bench.hosts.transport import LocalTransport, Result, Transport, quote_argv

# paramiko logs every failed banner read (a rebooting host) as a traceback on stderr; its
# errors reach the caller as typed HostErrors, so its log stays quiet.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class _UnknownHostKey(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey):
        super().__init__(f"unknown host key for {hostname}")
        self.hostname = hostname
        self.key = key


class _Reject(paramiko.MissingHostKeyPolicy):
    """Like paramiko.RejectPolicy, but keeps the offered key so the error can show it."""

    def missing_host_key(self, client, hostname, key):
        raise _UnknownHostKey(hostname, key)


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint: SHA256:<unpadded base64 of sha256(key blob)>."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_entry(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _trust_hint(host: Host) -> str:
    return (f"check the fingerprint out of band, then run `bench hosts trust {host.name}` "
            f"(appends it to {host.known_hosts_path})")


def _config(host: Host) -> Config:
    if host.ssh.config:
        return Config(runtime_ssh_path=os.path.expanduser(host.ssh.config))
    return Config()


def _harden(conn: Connection, known_hosts: str) -> None:
    conn.client.set_missing_host_key_policy(_Reject())
    if os.path.exists(known_hosts):
        conn.client.load_host_keys(known_hosts)
    gw = conn.gateway
    if isinstance(gw, Connection):
        _harden(gw, known_hosts)


def _connect_kwargs(host: Host) -> dict:
    kw: dict[str, float | list[str]] = {
        "banner_timeout": host.ssh.banner_timeout, "auth_timeout": host.ssh.auth_timeout,
        "channel_timeout": host.ssh.auth_timeout}
    if host.ssh.identity_file:
        kw["key_filename"] = [os.path.expanduser(host.ssh.identity_file)]
    return kw


def _gateway(host: Host, config: Config):
    """A ProxyJump chain from the inventory (hop1,hop2 with user@host:port), or None to let
    fabric take it from ssh config (hardened afterwards)."""
    if not host.ssh.proxy_jump:
        return None
    prev = None
    for hop in host.ssh.proxy_jump.split(","):
        kwargs = {"config": config.clone(), "connect_timeout": int(host.ssh.connect_timeout),
                  "connect_kwargs": _connect_kwargs(host)}
        if prev is not None:
            kwargs["gateway"] = prev
        prev = Connection(hop.strip(), **kwargs)
    return prev


def _connection(host: Host) -> Connection:
    config = _config(host)
    conn = Connection(host.address, user=host.user, port=host.port, config=config,
                      gateway=_gateway(host, config),
                      connect_timeout=max(1, int(host.ssh.connect_timeout)),
                      connect_kwargs=_connect_kwargs(host))
    _harden(conn, host.known_hosts_path)
    return conn


def _translate(host: Host, exc: BaseException) -> HostError:
    """A paramiko/socket exception raised while connecting or talking -> a typed HostError."""
    where = f"{host.user}@{host.address}:{host.port}"
    if isinstance(exc, _UnknownHostKey):
        return HostKeyError(host.name, f"host key of {where} is not in {host.known_hosts_path} "
                            f"({exc.key.get_name()} {fingerprint(exc.key)})", _trust_hint(host))
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostKeyError(
            host.name, f"host key of {where} does NOT match {host.known_hosts_path}: got "
            f"{fingerprint(exc.key)}, expected {fingerprint(exc.expected_key)} (possible "
            "man-in-the-middle, or the host was reinstalled)",
            f"verify out of band; if the change is legitimate remove the old entry with "
            f"`ssh-keygen -f {host.known_hosts_path} -R "
            f"'{known_hosts_entry(host.address, host.port)}'`"
            f" and run `bench hosts trust {host.name}`")
    if isinstance(exc, paramiko.AuthenticationException):
        return AuthError(host.name, f"{where} refused our credentials ({exc})",
                         "check ssh.identity_file and the host's authorized_keys")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return Unreachable(host.name, f"{where}: timed out connecting", "is the host up?")
    if isinstance(exc, (OSError, EOFError, paramiko.SSHException)):
        text = str(exc) or type(exc).__name__
        return Unreachable(host.name, f"{where}: {text}", "is the host up and sshd running?")
    return HostError(host.name, f"{where}: {type(exc).__name__}: {exc}")


class RemoteProcess:
    """A long-running command on an open channel (used by the host lock): read its stdout
    lines, close its stdin to let it finish."""

    def __init__(self, channel: paramiko.Channel):
        self._chan = channel
        self._out = channel.makefile("r")

    def readline(self, timeout: float = 30.0) -> str:
        self._chan.settimeout(timeout)
        try:
            line = self._out.readline()
        except socket.timeout:
            return ""
        return line.decode() if isinstance(line, bytes) else line

    def read_rest(self) -> str:
        data = self._out.read()
        return data.decode() if isinstance(data, bytes) else data

    def exit_status(self, timeout: float = 10.0) -> int | None:
        deadline = time.monotonic() + timeout
        while not self._chan.exit_status_ready():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        return self._chan.recv_exit_status()

    def close(self) -> None:
        try:
            self._chan.shutdown_write()
            self.exit_status(5.0)
        finally:
            self._chan.close()


class SSHTransport:
    """Transport over SSH for one inventory host. Connects lazily on first use; one connection
    is shared by the calls of one transport (fabric runs each command on its own channel),
    and a call after the connection dropped (host rebooted, sshd restarted) connects afresh:
    proof of a reboot is the boot_id, never the connection."""

    local = False

    def __init__(self, host: Host):
        self.host = host.name
        self.entry = host
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    def _open(self) -> Connection:
        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn
            conn = _connection(self.entry)
            try:
                conn.open()
            except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - closing a failed connection
                    pass
                raise _translate(self.entry, exc) from None
            self._conn = conn
            return conn

    def connect(self) -> None:
        self._open()

    def run(self, argv: Sequence[str], *, timeout: float | None = 60.0, check: bool = True,
            stdin: str | None = None, env: Mapping[str, str] | None = None) -> Result:
        argv = list(argv)
        full = argv
        if env:
            for k in env:
                if not k or "=" in k or not k.replace("_", "a").isalnum():
                    raise InputError(f"bad environment variable name {k!r}")
            full = ["env", "--", *[f"{k}={v}" for k, v in env.items()], *argv]
        command = quote_argv(full)
        conn = self._open()
        t0 = time.monotonic()
        try:
            r = conn.run(command, hide=True, warn=True, pty=False,
                         timeout=None if timeout is None else max(1, int(round(timeout))),
                         in_stream=io.StringIO(stdin) if stdin is not None else False)
        except CommandTimedOut:
            self.close()  # the channel may still be busy: start afresh next time
            raise CommandTimeout(self.host, f"`{' '.join(argv)}` ran past {timeout}s") from None
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
            self.close()
            raise _translate(self.entry, exc) from None
        res = Result(self.host, tuple(argv), r.exited, r.stdout, r.stderr, time.monotonic() - t0)
        if check and r.exited != 0:
            raise CommandFailed(self.host, argv, r.exited, r.stderr)
        return res

    def put(self, local: Path, remote: str) -> None:
        conn = self._open()
        try:
            conn.put(str(local), remote)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
            raise self._io_error("put", remote, exc) from None

    def get(self, remote: str, local: Path) -> None:
        conn = self._open()
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn.get(remote, str(local))
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
            raise self._io_error("get", remote, exc) from None

    def _io_error(self, what: str, remote: str, exc: Exception) -> HostError:
        if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
            return CommandFailed(self.host, [what, remote], 1, str(exc))
        return _translate(self.entry, exc)

    def spawn(self, argv: Sequence[str]) -> RemoteProcess:
        """Start a long-running command; its stdin stays open until RemoteProcess.close()."""
        conn = self._open()
        try:
            chan = conn.client.get_transport().open_session()
            chan.exec_command(quote_argv(argv))
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
            raise _translate(self.entry, exc) from None
        return RemoteProcess(chan)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except Exception:  # noqa: BLE001 - closing a dead connection
                    pass
                self._conn = None


def transport_for(host: Host) -> Transport:
    """The transport an inventory entry asks for."""
    if host.transport == "local":
        return LocalTransport(host.name)
    return SSHTransport(host)


# trust ------------------------------------------------------------------------------------------

def fetch_host_key(host: Host) -> tuple[str, str, str]:
    """Connect far enough to get the server's host key (no authentication, nothing stored):
    (key type, base64 blob, SHA256 fingerprint). ProxyJump hops must already be trusted."""
    config = _config(host)
    sock = None
    gw = _gateway(host, config)
    t = None
    try:
        if gw is not None:
            _harden(gw, host.known_hosts_path)
            gw.open()
            sock = gw.transport.open_channel("direct-tcpip", (host.address, host.port), ("", 0))
        else:
            sock = socket.create_connection((host.address, host.port),
                                            timeout=host.ssh.connect_timeout)
        t = paramiko.Transport(sock)
        t.banner_timeout = host.ssh.banner_timeout
        t.start_client(timeout=host.ssh.banner_timeout)
        key = t.get_remote_server_key()
    except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
        raise _translate(host, exc) from None
    finally:
        if t is not None:
            t.close()
        elif sock is not None:
            sock.close()
        if gw is not None:
            gw.close()
    return key.get_name(), key.get_base64(), fingerprint(key)


def known_host_status(host: Host, key_type: str, key_b64: str) -> str:
    """'known' (this exact key is there), 'changed' (another key of this type is) or 'unknown'."""
    path = host.known_hosts_path
    if not os.path.exists(path):
        return "unknown"
    keys = paramiko.HostKeys(path)
    entry = keys.lookup(known_hosts_entry(host.address, host.port))
    if not entry or key_type not in entry:
        return "unknown"
    return "known" if entry[key_type].get_base64() == key_b64 else "changed"


def append_known_host(host: Host, key_type: str, key_b64: str) -> str:
    """Append one line to the host's known_hosts file (created 0600 if missing); returns it."""
    path = Path(host.known_hosts_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = f"{known_hosts_entry(host.address, host.port)} {key_type} {key_b64}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as fh:
        fh.write(line)
    return line
