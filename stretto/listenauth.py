"""Who may use a server that listens on a port, and where it listens: the one set of rules for
`stretto-proxy --listen`, `stretto-console` and `stretto serve`.

- `split_address(listen, example)`: `--listen HOST:PORT` (`[V6]:PORT` for an IPv6 address)
  as (host, port); `url_host(host)` writes it back (IPv6 in brackets); `family_of(host)` the
  socket family to bind it with.
- `is_loopback(host)`: the only addresses a server may listen on without a token
  (`--no-auth`), and the only ones `stretto serve` takes without `--allow-remote`.
- `token_of(path, default, option)`: the token a client must send, the one line of a private
  file (0600; one others may read or write is refused, as stretto.home.read_secret says). A
  file that is not there is made with a new random token, at once (no reader sees it half
  written).
- `same_token(given, token)`: whether a client sent the token, compared in constant time.
- `no_auth_problem(host, instead)`: why `--no-auth` may not be used on `host`, if it may not.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
import tempfile
from pathlib import Path

from stretto.home import private_dirs, read_secret


def split_address(listen: str, example: str) -> tuple[str, int]:
    """`HOST:PORT`, or `[V6]:PORT` for an IPv6 address, as (host, port) (port 0: any free
    one); ValueError naming `--listen` and an `example` otherwise. A host is required (an empty
    one would listen on every interface), and an IPv6 address goes in brackets (`::1:80` could
    be read two ways)."""
    host, sep, port = listen.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    if not sep or not host or not port.isdigit() or int(port) > 65535 or "[" in host or "]" in host:
        raise ValueError(f"--listen {listen!r}: expected HOST:PORT, e.g. {example}")
    if ":" in host and not bracketed:
        raise ValueError(
            f"--listen {listen!r}: an IPv6 address goes in brackets, e.g. [::1]:{port}"
        )
    return host, int(port)


def url_host(host: str) -> str:
    """`host` as HOST:PORT and URLs write it: an IPv6 address in brackets (split_address's
    inverse)."""
    return f"[{host}]" if ":" in host else host


def family_of(host: str) -> socket.AddressFamily:
    """The socket family to listen on `host` with (split_address's host)."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def is_loopback(host: str) -> bool:
    """Whether `host` (an address, or `localhost` in any case) is this machine's loopback.
    Another name is not looked up: what it resolves to may change before the server binds it,
    so `--no-auth` is only for an address (or `localhost`) that can only be this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(path: str, option: str) -> str:
    """The token in `path` (its first line, trimmed), `option` naming the file in messages;
    ValueError when there is none, or when others than its owner may read or write the file."""
    token = read_secret(path, option).strip()
    if not token or "\n" in token:
        raise ValueError(f"{option} {path}: wants one line, the token")
    return token


def token_of(path: str | None, default: Path, option: str) -> tuple[str, str, bool]:
    """(the token, its file, whether the file was made now) for `option PATH`, else for the
    file `default` under the home. A file that is not there is made, 0600, holding a new
    random token (the home's folder made 0700 for the default); ValueError says what fails."""
    file = os.fspath(default) if path is None else os.path.expanduser(path)
    made = False
    if not os.path.lexists(file):
        made = _make_token_file(file, option, home=path is None)
    return read_token(file, option), file, made


def _make_token_file(file: str, option: str, home: bool) -> bool:
    """Write a new token to `file` at once (a temporary file linked to its name: no reader
    sees it half written, and a file another server made meanwhile is kept); whether it did."""
    folder = os.path.dirname(file) or "."
    try:
        if home:
            private_dirs(folder)
        fd, temp = tempfile.mkstemp(dir=folder, prefix=".listen-token-")  # 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(secrets.token_hex(32) + "\n")
                out.flush()
                os.fsync(out.fileno())
            os.link(temp, file)
        finally:
            os.unlink(temp)
    except FileExistsError:
        return False
    except OSError as exc:
        why = exc.strerror or exc
        raise ValueError(f"{option} {file}: cannot make it: {why}") from exc
    return True


def same_token(given: object, token: bytes) -> bool:
    """Whether `given` is the token (a string), compared in constant time."""
    if not isinstance(given, str):
        return False
    # surrogatepass: a JSON string may hold a lone surrogate, which plain UTF-8 refuses
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token)


def no_auth_problem(host: str, instead: str) -> str | None:
    """Why `--no-auth` may not be used listening on `host`, if it may not: only on loopback;
    `instead` names the option that gives a token."""
    if is_loopback(host):
        return None
    return (
        f"--no-auth: only on a loopback address (127.0.0.1, ::1, localhost), not {host}: "
        f"give {instead}"
    )
