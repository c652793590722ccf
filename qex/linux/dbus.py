"""The few D-Bus method calls qex makes to systemd (``qex.linux.scope``), on the wire.

D-Bus's wire format for the types systemd's StartTransientUnit takes
(``s o g b u t a ( ) v``), the EXTERNAL authentication, and a blocking call that waits
for its reply. Written here rather than imported: jeepney (a well-kept pure-Python
library) costs 8-10 ms to import (pathlib, re, fnmatch, contextlib) in a supervisor,
before its job's first instruction, where this costs ``socket`` and ``struct``, which
it has already. Only what qex sends and reads is here: no signals, no fds, no
introspection, little-endian only; ``_socket`` and ``struct``, nothing else.
"""

from __future__ import annotations

import _socket  # the C module: socket.py costs a starting supervisor 2.5 ms more (selectors, array, enums)
import os
import struct

METHOD_CALL, METHOD_RETURN, ERROR, SIGNAL = 1, 2, 3, 4
_ALIGN = {
    "y": 1,
    "b": 4,
    "n": 2,
    "q": 2,
    "i": 4,
    "u": 4,
    "x": 8,
    "t": 8,
    "d": 8,
    "s": 4,
    "o": 4,
    "g": 1,
    "a": 4,
    "(": 8,
    "v": 1,
    "h": 4,
}
_FIXED = {"y": "B", "b": "I", "n": "h", "q": "H", "i": "i", "u": "I", "x": "q", "t": "Q", "d": "d", "h": "I"}


class DBusError(Exception):
    """The peer answered with an error (``name``), or the connection failed."""

    def __init__(self, name: str, message: str = ""):
        super().__init__(f"{name}: {message}" if message else name)
        self.name, self.message = name, message


def _one(sig: str, i: int) -> int:
    """The end of the single complete type that starts at ``sig[i]``."""
    c = sig[i]
    if c == "a":
        return _one(sig, i + 1)
    if c in "({":
        depth = 0
        for j in range(i, len(sig)):
            depth += sig[j] in "({"
            depth -= sig[j] in ")}"
            if depth == 0:
                return j + 1
        raise ValueError(f"unbalanced signature {sig!r}")
    return i + 1


def _split(sig: str) -> list[str]:
    out, i = [], 0
    while i < len(sig):
        j = _one(sig, i)
        out.append(sig[i:j])
        i = j
    return out


class _Writer:
    def __init__(self):
        self.buf = bytearray()

    def pad(self, n: int) -> None:
        self.buf.extend(b"\0" * (-len(self.buf) % n))

    def put(self, sig: str, value: object) -> None:
        c = sig[0]
        self.pad(_ALIGN[c])
        if c in _FIXED:
            self.buf.extend(struct.pack("<" + _FIXED[c], int(value) if c != "d" else value))
        elif c in "so":
            data = value.encode()
            self.buf.extend(struct.pack("<I", len(data)) + data + b"\0")
        elif c == "g":
            data = value.encode()
            self.buf.extend(bytes([len(data)]) + data + b"\0")
        elif c == "v":
            inner, val = value
            self.put("g", inner)
            self.put(inner, val)
        elif c == "(":
            for part, val in zip(_split(sig[1:-1]), value):
                self.put(part, val)
        elif c == "a":
            at = len(self.buf)
            self.buf.extend(b"\0\0\0\0")
            self.pad(_ALIGN[sig[1]])
            start = len(self.buf)
            for item in value:
                self.put(sig[1:], item)
            struct.pack_into("<I", self.buf, at, len(self.buf) - start)
        else:
            raise ValueError(f"type {c!r} is not written here")


class _Reader:
    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def get(self, sig: str) -> object:
        c = sig[0]
        self.pos += -self.pos % _ALIGN[c]
        if c in _FIXED:
            fmt = "<" + _FIXED[c]
            (value,) = struct.unpack_from(fmt, self.data, self.pos)
            self.pos += struct.calcsize(fmt)
            return bool(value) if c == "b" else value
        if c in "so":
            (n,) = struct.unpack_from("<I", self.data, self.pos)
            value = self.data[self.pos + 4 : self.pos + 4 + n].decode(errors="replace")
            self.pos += 5 + n
            return value
        if c == "g":
            n = self.data[self.pos]
            value = self.data[self.pos + 1 : self.pos + 1 + n].decode()
            self.pos += 2 + n
            return value
        if c == "v":
            inner = self.get("g")
            return self.get(inner)
        if c == "(":
            return tuple(self.get(part) for part in _split(sig[1:-1]))
        if c == "a":
            (n,) = struct.unpack_from("<I", self.data, self.pos)
            self.pos += 4
            self.pos += -self.pos % _ALIGN[sig[1]]
            end, items = self.pos + n, []
            while self.pos < end:
                items.append(self.get(sig[1:]))
            return items
        raise ValueError(f"type {c!r} is not read here")


def message(
    serial: int, path: str, interface: str, member: str, destination: str | None, signature: str = "", args: tuple = ()
) -> bytes:
    """A method call, serialised."""
    body = _Writer()
    for part, value in zip(_split(signature), args):
        body.put(part, value)
    fields = [(1, ("o", path)), (2, ("s", interface)), (3, ("s", member))]
    if destination:
        fields.append((6, ("s", destination)))
    if signature:
        fields.append((8, ("g", signature)))
    head = _Writer()
    head.buf.extend(b"l" + bytes([METHOD_CALL, 0, 1]))
    head.put("u", len(body.buf))
    head.put("u", serial)
    head.put("a(yv)", fields)
    head.pad(8)
    return bytes(head.buf + body.buf)


class Connection:
    """One blocking connection: systemd's private socket (no bus daemon: no Hello) or a bus."""

    def __init__(self, path: str, bus: bool, timeout: float = 5.0):
        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        self.serial, self.pending = 0, b""
        try:
            self.sock.connect(path)
            self.sock.sendall(b"\0AUTH EXTERNAL " + str(os.geteuid()).encode().hex().encode() + b"\r\n")
            line = self._line()
            if not line.startswith(b"OK"):
                raise DBusError("org.freedesktop.DBus.Error.AuthFailed", line.decode(errors="replace"))
            self.sock.sendall(b"BEGIN\r\n")
            if bus:
                self.call("/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello", "org.freedesktop.DBus")
        except BaseException:
            self.sock.close()
            raise

    def _line(self) -> bytes:
        while b"\r\n" not in self.pending:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise DBusError("org.freedesktop.DBus.Error.NoReply", "the peer closed the connection")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\r\n")
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.pending) < n:
            chunk = self.sock.recv(max(4096, n - len(self.pending)))
            if not chunk:
                raise DBusError("org.freedesktop.DBus.Error.NoReply", "the peer closed the connection")
            self.pending += chunk
        data, self.pending = self.pending[:n], self.pending[n:]
        return data

    def call(
        self,
        path: str,
        interface: str,
        member: str,
        destination: str | None = None,
        signature: str = "",
        args: tuple = (),
    ) -> list:
        """Call a method; its reply's arguments, or DBusError."""
        self.serial += 1
        self.sock.sendall(message(self.serial, path, interface, member, destination, signature, args))
        while True:
            kind, fields, body = self._receive()
            if fields.get(5) != self.serial:
                continue  # a signal (NameAcquired after Hello), or not ours
            reader = _Reader(body)
            values = [reader.get(part) for part in _split(fields.get(8, ""))]
            if kind == ERROR:
                raise DBusError(fields.get(4, "?"), values[0] if values and isinstance(values[0], str) else "")
            return values

    def _receive(self) -> tuple[int, dict, bytes]:
        fixed = self._exactly(16)
        if fixed[:1] != b"l":
            raise DBusError("org.freedesktop.DBus.Error.InvalidArgs", "a big-endian peer (not read here)")
        kind = fixed[1]
        body_len, _, fields_len = struct.unpack_from("<III", fixed, 4)
        rest = self._exactly(fields_len + (-(16 + fields_len) % 8) + body_len)
        head = _Reader(fixed + rest, 12)
        fields = dict(head.get("a(yv)"))
        return kind, fields, (fixed + rest)[16 + fields_len + (-(16 + fields_len) % 8) :]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
