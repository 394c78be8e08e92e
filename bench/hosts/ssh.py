"""SSHTransport: the Transport of bench.hosts.transport over SSH (fabric on paramiko).

The only module that imports fabric or paramiko. Rules it enforces:

- where a host is comes from ssh_config as OpenSSH users expect (bench.hosts.sshconfig): the
  inventory's `address` is looked up like `ssh ADDRESS` would (HostName, Port, User,
  IdentityFile, ProxyJump, ProxyCommand, HostKeyAlias; Include and Match as paramiko's
  SSHConfig supports them), and what the inventory sets explicitly (user, port,
  ssh.identity_file, ssh.proxy_jump) wins; defaults root and 22 apply only when neither sets
  them. The files: the inventory's `ssh.config`, else $BENCH_SSH_CONFIG, else ~/.ssh/config and
  /etc/ssh/ssh_config. Fabric's own ssh_config loading is off: every value it gets is resolved.
- host keys are verified against the host's known_hosts file (inventory `ssh.known_hosts`,
  default ~/.ssh/known_hosts), read by bench.hosts.knownhosts (markers understood), for the
  host and for every ProxyJump hop, under the name OpenSSH looks up (HostKeyAlias, or the
  HostName, `[HostName]:Port` off port 22); nothing is ever added silently. Unknown:
  UnknownHostKey, whose hint is `bench hosts trust HOST`. Another key pinned, of any type:
  ChangedHostKey with both fingerprints (replace with `bench hosts trust HOST --replace OLD`).
  A key under @revoked: RevokedHostKey. Host certificates (@cert-authority) are not verified
  (paramiko cannot): the host's own key must be pinned, and the message says so.
- every command is an argv, quoted element by element by bench.hosts.transport.quote_argv; an
  environment is passed as `env -- K=V argv...` (quoted too), never through the server's
  AcceptEnv and never pasted into a shell string.
- paramiko's connect, banner and auth timeouts come from the inventory; a command's timeout
  is CommandTimeout. Connection problems are Unreachable, worded `cannot connect to HOST
  (ADDRESS:PORT): CAUSE` with a fix; refused credentials AuthError.
- every read is bounded (bench.hosts.sshio): a command's stdout and stderr (output_max), a
  copied file (get's limit), a spawned command's line and rest; past the bound, one line.
- paramiko's log goes to the `bench.ssh` logger (its records at DEBUG or INFO, never higher:
  its errors reach the caller as typed HostErrors), with what each host resolved to; nothing
  shows unless that logger is enabled (`bench -v`).
"""

from __future__ import annotations

import base64
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko
from fabric import Config, Connection

from bench.errors import (AuthError, BenchError, ChangedHostKey, CommandFailed, CommandTimeout,
                          HostError, HostKeyError, InputError, RevokedHostKey,
                          Unreachable, UnknownHostKey)
from bench.hosts import knownhosts, sshconfig, sshio
from bench.hosts.inventory import Host
from bench.hosts.knownhosts import KnownHosts, Verdict
from bench.hosts.sshconfig import Endpoint, SSHConfigError
from bench.hosts.transport import GET_MAX, LocalTransport, Result, Transport, quote_argv

log = logging.getLogger("bench.ssh")
_paramiko_log = logging.getLogger("paramiko")


class _ToBenchSSH(logging.Handler):
    """paramiko's records, re-logged on `bench.ssh` at DEBUG (INFO for its INFO and above: a
    failed banner read while a host reboots is no error of bench's), exceptions as one line."""

    def emit(self, record: logging.LogRecord) -> None:
        level = logging.DEBUG if record.levelno <= logging.DEBUG else logging.INFO
        if not log.isEnabledFor(level):
            return
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text += f" ({type(exc).__name__}: {exc})"
        log.log(level, "%s: %s", record.name, text)


_paramiko_log.addHandler(_ToBenchSSH())
_paramiko_log.propagate = False


def _sync_logging() -> None:
    """paramiko makes records only at the levels `bench.ssh` shows (checked per connection,
    so `-v` set after import counts)."""
    level = (logging.DEBUG if log.isEnabledFor(logging.DEBUG)
             else logging.INFO if log.isEnabledFor(logging.INFO) else logging.CRITICAL + 1)
    _paramiko_log.setLevel(level)


_sync_logging()


# resolution -------------------------------------------------------------------------------------

_CONFIG_CACHE: dict[tuple, paramiko.SSHConfig] = {}


def _parsed(src: sshconfig.ConfigSource, alias: str) -> paramiko.SSHConfig:
    """paramiko's parse of the text src gives for alias (cached while the files stay)."""
    try:
        key = (tuple((f, os.stat(f).st_mtime_ns, os.stat(f).st_size) for f in src.files), alias)
    except OSError as exc:
        raise SSHConfigError(f"{exc.filename}: cannot read ssh config: {exc.strerror}") from None
    cfg = _CONFIG_CACHE.get(key)
    if cfg is None:
        text = sshconfig.config_text(src, alias)
        try:
            cfg = paramiko.SSHConfig.from_text(text)
        except (paramiko.ssh_exception.ConfigParseError, ValueError) as exc:
            raise SSHConfigError(f"{src.label()}: {exc}",
                                 f"fix the file, or set {sshconfig.ENV}=none") from None
        if len(_CONFIG_CACHE) > 256:
            _CONFIG_CACHE.clear()
        _CONFIG_CACHE[key] = cfg
    return cfg


def resolve_endpoint(host: Host) -> Endpoint:
    """Where and as whom bench connects to an inventory host (ssh_config applied)."""
    src = sshconfig.config_source(host.ssh.config)

    def lookup(alias: str) -> Mapping:
        cfg = _parsed(src, alias)
        try:
            return cfg.lookup(alias)
        except Exception as exc:  # noqa: BLE001 - Match exec, tokens: a typed error
            raise SSHConfigError(f"{src.label()} (host {alias}): {type(exc).__name__}: {exc}",
                                 f"fix the file, or set {sshconfig.ENV}=none") from None

    ep = sshconfig.resolve(host.address, lookup, source=src, user=host.user, port=host.port,
                           identity_file=host.ssh.identity_file,
                           proxy_jump=host.ssh.proxy_jump)
    log.debug("%s: %s (ssh_config: %s, %s)", host.name, ep.describe(), src.label(), src.origin)
    return ep


# host keys ----------------------------------------------------------------------------------------

class _KeyRefused(paramiko.SSHException):
    def __init__(self, ep: Endpoint, verdict: Verdict):
        super().__init__(f"host key of {ep.where}: {verdict.status}")
        self.ep = ep
        self.verdict = verdict


class _Verify(paramiko.MissingHostKeyPolicy):
    """Called by paramiko for a key it holds nothing of that type for: the verdict of the
    known_hosts file decides (known: accept; anything else: refuse, keeping the verdict)."""

    def __init__(self, ep: Endpoint, known: KnownHosts):
        self.ep = ep
        self.known = known

    def missing_host_key(self, client, hostname, key):
        v = self.known.check(self.ep.key_name, key.get_name(), key.get_base64())
        if v.status != "known":
            raise _KeyRefused(self.ep, v)


def _pkeys(ep: Endpoint, known: KnownHosts) -> list[paramiko.PKey]:
    out = []
    for e in known.pinned(ep.key_name):
        try:
            out.append(paramiko.PKey.from_type_string(e.key_type,
                                                      base64.b64decode(e.key_b64)))
        except Exception:  # noqa: BLE001 - a key type paramiko cannot load is never matched
            log.debug("%s:%d: paramiko cannot load a %s key; skipped", known.path, e.line,
                      e.key_type)
    return out


def _arm(client: paramiko.SSHClient, ep: Endpoint, known: KnownHosts) -> None:
    """The client verifies ep's key: the pinned keys under paramiko's own lookup name (so it
    asks the server for a pinned type first), the rest decided by _Verify."""
    client.set_missing_host_key_policy(_Verify(ep, known))
    name = knownhosts.host_name(ep.hostname, ep.port)
    for k in _pkeys(ep, known):
        client.get_host_keys().add(name, k.get_name(), k)


def _known(host: Host) -> KnownHosts:
    kh = KnownHosts.load(host.known_hosts_path)
    for line, why in kh.skipped:
        log.debug("%s:%d: skipped (%s)", kh.path, line, why)
    return kh


def _key_error(host: Host, ep: Endpoint, v: Verdict) -> HostKeyError:
    kh = host.known_hosts_path
    typ, fp = v.offered
    if ep.alias != host.address and v.status in ("changed", "unknown"):
        # a ProxyJump hop: `bench hosts trust HOST` pins the host, not its hops
        return (ChangedHostKey if v.status == "changed" else UnknownHostKey)(
            host.name, f"key of the ProxyJump hop {ep.where} ({typ} {fp}) is "
            + ("not pinned" if v.status == "unknown" else "NOT the one pinned")
            + f" in {kh} as {v.name}",
            f"check it out of band, then pin it: `ssh-keyscan -p {ep.port} {ep.hostname}` "
            f"gives the line, written as `{v.name} {typ} KEY` in {kh} (or trust an inventory "
            "entry for the hop)")
    if v.status == "revoked" and v.revoked is not None:
        return RevokedHostKey(
            host.name, f"{ep.where} offers {typ} {fp}, which {kh}:{v.revoked.line} marks "
            "@revoked: refused", "the host needs a new host key; a revoked key is never "
            "accepted")
    if v.status == "changed":
        old = tuple(f"{e.key_type} {e.fingerprint}" for e in v.pinned)
        return ChangedHostKey(
            host.name, f"host key of {ep.where} does NOT match {kh}: it offers {typ} {fp}, "
            f"{kh} pins " + ", ".join(f"{o} (line {e.line})" for o, e in zip(old, v.pinned))
            + f" for {v.name} (possible man-in-the-middle, or the host was reinstalled)",
            "verify the new key out of band; if the change is legitimate run `bench hosts "
            f"trust {host.name} --replace {v.pinned[0].fingerprint}`", old=old,
            new=f"{typ} {fp}")
    ca = ""
    if v.authorities:
        ca = (f"; {kh}:{v.authorities[0].line} trusts a host certificate authority for it, "
              "but bench (paramiko) cannot verify host certificates: pin the host's own key")
    return UnknownHostKey(host.name, f"host key of {ep.where} is not in {kh} as {v.name} "
                          f"({typ} {fp}){ca}", _trust_hint(host, ep))


def _trust_hint(host: Host, ep: Endpoint) -> str:
    return (f"check the fingerprint out of band, then run `bench hosts trust {host.name}` "
            f"(appends it to {host.known_hosts_path} as {ep.key_name})")


# connections ------------------------------------------------------------------------------------

def _connect_kwargs(host: Host, ep: Endpoint) -> dict:
    kw: dict[str, float | list[str]] = {
        "banner_timeout": host.ssh.banner_timeout, "auth_timeout": host.ssh.auth_timeout,
        "channel_timeout": host.ssh.auth_timeout}
    if ep.identity_files:
        kw["key_filename"] = list(ep.identity_files)
    return kw


def _fabric(host: Host, ep: Endpoint, known: KnownHosts, gateway) -> Connection:
    for f in ep.identity_files:
        if not os.path.isfile(f):
            raise InputError(f"{host.name}: identity file {f} does not exist",
                             "fix ssh.identity_file in the inventory (or IdentityFile)")
    try:
        conn = Connection(ep.hostname, user=ep.user, port=ep.port,
                          config=Config(ssh_config=paramiko.SSHConfig()),
                          gateway=gateway if gateway is not None else ep.proxy_command,
                          connect_timeout=max(1, int(host.ssh.connect_timeout)),
                          connect_kwargs=_connect_kwargs(host, ep))
    except ValueError as exc:
        raise InputError(f"{host.name}: cannot connect to {ep.where}: {exc}") from None
    _arm(conn.client, ep, known)
    return conn


def _gateway(host: Host, ep: Endpoint, known: KnownHosts) -> Connection | None:
    """The ProxyJump chain (outermost hop first), each hop verified; None without jumps."""
    prev = None
    for hop in ep.jumps:
        prev = _fabric(host, hop, known, prev)
    return prev


def _connection(host: Host) -> tuple[Connection, Endpoint, KnownHosts]:
    _sync_logging()
    ep = resolve_endpoint(host)
    known = _known(host)
    return _fabric(host, ep, known, _gateway(host, ep, known)), ep, known


def _translate(host: Host, ep: Endpoint | None, exc: BaseException,
               known: KnownHosts | None = None, connecting: bool = True) -> BenchError:
    """A paramiko/socket exception raised while connecting (or, not `connecting`, talking on
    an open connection) -> a typed error: `cannot connect to HOST (ADDRESS:PORT): CAUSE`."""
    where = ep.where if ep is not None else f"{host.user or '?'}@{host.address}"
    if isinstance(exc, _KeyRefused):
        return _key_error(host, exc.ep, exc.verdict)
    if isinstance(exc, paramiko.BadHostKeyException) and ep is not None and known is not None:
        bad = next((e for e in (ep, *ep.jumps) if e.hostname == exc.hostname), ep)
        return _key_error(host, bad, known.check(bad.key_name, exc.key.get_name(),
                                                 exc.key.get_base64()))
    if isinstance(exc, paramiko.AuthenticationException):
        return AuthError(host.name, f"{where} refused our credentials ({exc})",
                         "check ssh.identity_file (or IdentityFile in ssh_config) and the "
                         "host's authorized_keys")
    address = f"{ep.hostname}:{ep.port}" if ep is not None else host.address
    cause, fix = _cause(host, exc, ep.hostname if ep is not None else host.address)
    if cause is None:
        return HostError(host.name, f"{where}: {type(exc).__name__}: {exc}")
    if ep is not None and ep.jumps:
        cause += " (through ProxyJump " + " -> ".join(j.where for j in ep.jumps) + ")"
    if connecting:
        return _cannot_connect(host.name, address, cause, fix)
    return Unreachable(host.name, f"lost the connection to {address}: {cause}", fix)


def _cannot_connect(host: str, address: str, cause: str, fix: str) -> Unreachable:
    """Unreachable (the type per-host results report), worded `cannot connect to HOST
    (ADDRESS:PORT): CAUSE`: the host is named in the sentence, not as HostError's prefix."""
    err = Unreachable(host, cause, fix)
    err.message = f"cannot connect to {host} ({address}): {cause}"
    err.args = (err.message,)
    return err


def _cause(host: Host, exc: BaseException, hostname: str) -> tuple[str | None, str]:
    """Why a connection failed, in bench's words, and what to check; (None, "") for an
    exception that is no connection's."""
    known = sshio.connect_cause(exc, host.ssh.connect_timeout, hostname)
    if known is not None:
        return known
    if isinstance(exc, paramiko.SSHException) and "banner" in str(exc):
        return (f"no SSH server answered ({exc})",
                "is that port an SSH server's, and is sshd accepting connections?")
    if isinstance(exc, (OSError, EOFError, paramiko.SSHException)):
        text = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) \
            or type(exc).__name__
        return text, sshio.UP
    return None, ""


REST_MAX = 64 << 10          # bytes of a spawned command's remaining output kept
class RemoteProcess:
    """A long-running command on an open channel (used by the host lock): read its stdout
    lines, close its stdin to let it finish."""

    def __init__(self, channel: paramiko.Channel):
        self._chan = channel
        self._out = channel.makefile("r")

    def readline(self, timeout: float = 30.0) -> str:
        self._chan.settimeout(timeout)
        try:
            line = self._out.readline(sshio.LINE_MAX)
        except socket.timeout:
            return ""
        return line.decode() if isinstance(line, bytes) else line

    def read_rest(self, timeout: float = 10.0, limit: int = REST_MAX) -> str:
        """What the command still prints, up to `limit` bytes and `timeout` s (a host's output
        is untrusted and a command that neither prints nor ends must not hang the caller)."""
        self._chan.settimeout(timeout)
        try:
            data = self._out.read(limit)
        except (socket.timeout, OSError, EOFError):
            return ""
        return data.decode(errors="replace") if isinstance(data, bytes) else data

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
        except (OSError, EOFError, paramiko.SSHException):
            pass            # a channel whose connection is gone: closing it is all there is
        finally:
            self._chan.close()


class SSHTransport:
    """Transport over SSH for one inventory host. Connects lazily on first use; one connection
    is shared by the calls of one transport (each command runs on its own channel),
    and a call after the connection dropped (host rebooted, sshd restarted) connects afresh:
    proof of a reboot is the boot_id, never the connection."""

    local = False

    def __init__(self, host: Host, output_max: int = sshio.RUN_OUTPUT_MAX):
        self.host = host.name
        self.entry = host
        self.output_max = output_max
        self._conn: Connection | None = None
        self._ep: Endpoint | None = None
        self._known: KnownHosts | None = None
        self._lock = threading.Lock()

    def _open(self) -> Connection:
        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn
            conn, self._ep, self._known = _connection(self.entry)
            try:
                conn.open()
            except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
                _close(conn)
                raise self._error(exc) from None
            self._conn = conn
            return conn

    def _error(self, exc: BaseException, connecting: bool = True) -> BenchError:
        return _translate(self.entry, self._ep, exc, self._known, connecting)

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
            chan = conn.transport.open_session()
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
            self.close()
            raise self._error(exc) from None
        try:
            rc, out, err = sshio.exchange(chan, command, stdin, timeout, self.output_max)
        except sshio.TimedOut:
            self.close()  # the channel may still be busy: start afresh next time
            raise CommandTimeout(self.host, f"`{' '.join(argv)}` ran past {timeout}s") from None
        except sshio.TooMuch as exc:
            raise HostError(self.host, f"`{' '.join(argv)[:200]}` sent more than "
                            f"{self.output_max} bytes on its {exc}: refused (bench reads at "
                            "most that much of a command's output)",
                            "check what the command prints on the host; the bound is "
                            "bench.hosts.sshio.RUN_OUTPUT_MAX") from None
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
            self.close()
            raise self._error(exc, connecting=False) from None
        finally:
            chan.close()
        res = Result(self.host, tuple(argv), rc, out, err, time.monotonic() - t0)
        if check and rc != 0:
            raise CommandFailed(self.host, argv, rc, err)
        return res

    def put(self, local: Path, remote: str) -> None:
        conn = self._open()
        try:
            conn.put(str(local), remote)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
            raise self._io_error("put", remote, exc) from None

    def get(self, remote: str, local: Path, *, limit: int | None = None) -> None:
        """Copy the host's file `remote` to `local`, at most `limit` bytes (default GET_MAX):
        a larger file, or one that grows past it while copied, is refused and nothing is
        left at `local`."""
        limit = GET_MAX if limit is None else limit
        conn = self._open()
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        try:
            copied = sshio.copy_bounded(conn.sftp(), remote, Path(local), limit)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
            Path(local).unlink(missing_ok=True)
            raise self._io_error("get", remote, exc) from None
        if copied > limit:
            Path(local).unlink(missing_ok=True)
            raise HostError(self.host, f"get {remote}: the file holds more than {limit} "
                            "bytes: refused (bench copies at most that much of it)",
                            "check the file on the host; see docs/bundle.md, Limits "
                            "(BENCH_BUNDLE_MAX_* variables) for a bundle's")

    def _io_error(self, what: str, remote: str, exc: Exception) -> BenchError:
        if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
            return CommandFailed(self.host, [what, remote], 1, str(exc))
        if type(exc) is OSError and exc.errno is None and self._conn is not None \
                and self._conn.is_connected:
            # a status the host's SFTP server sent (paramiko: IOError(text), no errno, for
            # SSH_FX_FAILURE; a full disk there is one): the host answered, it is not gone
            return HostError(self.host, f"{what} {remote}: the host's SFTP server refused it "
                             f"({str(exc)[:200]}): is its disk full?",
                             f"check free space on the host (df -h {remote.rsplit('/', 1)[0]})")
        return self._error(exc)

    def spawn(self, argv: Sequence[str]) -> RemoteProcess:
        """Start a long-running command; its stdin stays open until RemoteProcess.close()."""
        conn = self._open()
        try:
            chan = conn.client.get_transport().open_session()
            chan.exec_command(quote_argv(argv))
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
            raise self._error(exc) from None
        return RemoteProcess(chan)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                _close(self._conn)
                self._conn = None


def transport_for(host: Host) -> Transport:
    """The transport an inventory entry asks for."""
    if host.transport == "local":
        return LocalTransport(host.name)
    return SSHTransport(host)


def _close(conn: Connection) -> None:
    """Close a connection and its ProxyJump chain (fabric leaves gateways open)."""
    while isinstance(conn, Connection):
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - closing a dead connection
            pass
        conn = conn.gateway


# trust ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HostKeyOffer:
    """The key a host offers (fetched without authenticating) and what its known_hosts file
    says about it under the name OpenSSH and paramiko look up (`verdict.name`)."""
    host: str
    endpoint: Endpoint
    key_type: str
    key_b64: str
    fingerprint: str
    known_hosts: str
    verdict: Verdict


def _prefer(t: paramiko.Transport, pinned: list[knownhosts.Entry]) -> None:
    """Ask the server for a pinned key type first (as paramiko's SSHClient does), so a host
    that has several keys offers the one trusted, and a different one means a changed key."""
    opts = t.get_security_options()
    want = []
    for e in pinned:
        for k in (["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if e.key_type == "ssh-rsa"
                  else [e.key_type]):
            if k in opts.key_types and k not in want:
                want.append(k)
    opts.key_types = tuple(want + [k for k in opts.key_types if k not in want])


def _server_sock(host: Host, ep: Endpoint, gw: Connection | None):
    if gw is not None:
        gw.open()
        return gw.transport.open_channel("direct-tcpip", (ep.hostname, ep.port), ("", 0))
    if ep.proxy_command:
        return paramiko.ProxyCommand(ep.proxy_command)
    return socket.create_connection((ep.hostname, ep.port), timeout=host.ssh.connect_timeout)


def fetch_host_key(host: Host) -> HostKeyOffer:
    """Connect far enough to get the server's host key (no authentication, nothing stored),
    through ssh_config's HostName, Port, ProxyJump or ProxyCommand as a connection would go.
    ProxyJump hops must already be trusted."""
    _sync_logging()
    ep = resolve_endpoint(host)
    known = _known(host)
    gw = _gateway(host, ep, known)
    sock = t = None
    try:
        sock = _server_sock(host, ep, gw)
        t = paramiko.Transport(sock)
        t.banner_timeout = host.ssh.banner_timeout
        _prefer(t, known.pinned(ep.key_name))
        t.start_client(timeout=host.ssh.banner_timeout)
        key = t.get_remote_server_key()
    except Exception as exc:  # noqa: BLE001 - every failure becomes a typed error
        raise _translate(host, ep, exc, known) from None
    finally:
        if t is not None:
            t.close()
        elif sock is not None:
            sock.close()
        if gw is not None:
            _close(gw)
    typ, b64 = key.get_name(), key.get_base64()
    return HostKeyOffer(host.name, ep, typ, b64, knownhosts.fingerprint(b64),
                        host.known_hosts_path, known.check(ep.key_name, typ, b64))


def refuse(host: Host, offer: HostKeyOffer) -> HostKeyError:
    """The typed error a connection would raise for this offer (revoked, changed, unknown)."""
    return _key_error(host, offer.endpoint, offer.verdict)


def pin_host_key(offer: HostKeyOffer, replace: str | None = None) -> str:
    """Write the offered key to known_hosts under its lookup name: appended when nothing is
    pinned; with `replace` (the SHA256 fingerprint of a pinned key) that key is replaced.
    Returns the line written. A revoked key is never written."""
    v = offer.verdict
    if v.status == "revoked":
        raise InputError(f"{offer.host}: a revoked key is never pinned")
    if replace is None:
        if v.status != "unknown":
            raise InputError(f"{offer.host}: {v.name} already has pinned keys; "
                             "--replace OLD_FINGERPRINT names the one to replace")
        return knownhosts.append(offer.known_hosts, v.name, offer.key_type, offer.key_b64)
    old = [e for e in v.pinned if e.fingerprint == replace]
    if not old:
        pinned = ", ".join(e.describe() for e in v.pinned) or "nothing"
        raise InputError(f"{offer.host}: --replace {replace} is not a key pinned for {v.name} "
                         f"in {offer.known_hosts} (pinned: {pinned})",
                         "copy the old fingerprint from the refusal message")
    return knownhosts.replace(offer.known_hosts, v.name, old, offer.key_type, offer.key_b64)
