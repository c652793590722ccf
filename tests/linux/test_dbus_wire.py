"""qex.linux.dbus: the D-Bus wire format of what qex sends systemd (StartTransientUnit),
byte for byte as jeepney 0.9 (a reference implementation) serialises it, and read back."""

import socket
import threading

import pytest

from qex.linux import dbus

ARGS = (
    "qex-abc-1.scope",
    "fail",
    [("PIDs", ("au", [12, 34])), ("MemoryAccounting", ("b", True)), ("OOMPolicy", ("s", "continue"))],
    [],
)
SIG = "ssa(sv)a(sa(sv))"
# jeepney.new_method_call(DBusAddress("/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1",
#   interface="org.freedesktop.systemd1.Manager"), "StartTransientUnit", SIG, ARGS).serialise(serial=7)
JEEPNEY = bytes.fromhex(
    "6c0100019000000007000000b600000001016f00190000002f6f72672f667265656465736b746f702f73797374656d6431"
    "0000000000000002017300200000006f72672e667265656465736b746f702e73797374656d64312e4d616e616765720000"
    "000000000000030173001200000053746172745472616e7369656e74556e697400000000000006017300180000006f7267"
    "2e667265656465736b746f702e73797374656d643100000000000000000801670010737361287376296128736128737629"
    "290000000f0000007165782d6162632d312e73636f706500040000006661696c0000000061000000000000000400000050"
    "4944730002617500000000080000000c0000002200000000000000100000004d656d6f72794163636f756e74696e670001"
    "62000100000000000000090000004f4f4d506f6c6963790001730000000008000000636f6e74696e7565000000000000"
    "0000"
)


def test_start_transient_unit_is_serialised_as_the_reference_does():
    got = dbus.message(
        7,
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "StartTransientUnit",
        "org.freedesktop.systemd1",
        SIG,
        ARGS,
    )
    assert got == JEEPNEY
    body = dbus._Reader(got, 16 + 0xB6 + (-(16 + 0xB6) % 8))
    assert [body.get(t) for t in dbus._split(SIG)] == [
        "qex-abc-1.scope",
        "fail",
        [("PIDs", [12, 34]), ("MemoryAccounting", True), ("OOMPolicy", "continue")],
        [],
    ]


def _peer(sock: socket.socket, reply: bytes) -> None:
    """A fake manager: EXTERNAL auth, then one reply to whatever the call was."""
    data = b""
    while b"\r\n" not in data:
        data += sock.recv(4096)
    sock.sendall(b"OK 0123456789abcdef0123456789abcdef\r\n")
    while b"BEGIN\r\n" not in data:
        data += sock.recv(4096)
    data = data.split(b"BEGIN\r\n", 1)[1]
    while len(data) < 16:
        data += sock.recv(4096)
    sock.sendall(reply)
    sock.recv(4096)


@pytest.mark.parametrize(
    "kind,body_sig,values,expect",
    [
        (dbus.METHOD_RETURN, "o", ("/org/freedesktop/systemd1/job/42",), ["/org/freedesktop/systemd1/job/42"]),
        (dbus.ERROR, "s", ("Unit qex-abc-1.scope already exists.",), "org.freedesktop.systemd1.UnitExists"),
    ],
)
def test_a_call_reads_its_reply_or_its_error(tmp_path, kind, body_sig, values, expect):
    reply = bytearray(dbus.message(1, "/", "x.y", "z", None, body_sig, values))
    reply[1] = kind  # a reply: its header names the serial it answers (5) and, for an error, the name (4)
    fields = [(5, ("u", 1)), (8, ("g", body_sig))] + ([(4, ("s", expect))] if kind == dbus.ERROR else [])
    head = dbus._Writer()
    head.buf.extend(bytes(reply[:4]))
    body = bytes(
        reply[16 + int.from_bytes(reply[12:16], "little") + (-(16 + int.from_bytes(reply[12:16], "little")) % 8) :]
    )
    head.put("u", len(body))
    head.put("u", 9)
    head.put("a(yv)", fields)
    head.pad(8)
    path = str(tmp_path / "private")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    t = threading.Thread(target=lambda: _peer(server.accept()[0], bytes(head.buf) + body))
    t.start()
    conn = dbus.Connection(path, bus=False)
    try:
        if kind == dbus.ERROR:
            with pytest.raises(dbus.DBusError) as caught:
                conn.call(
                    "/org/freedesktop/systemd1",
                    "org.freedesktop.systemd1.Manager",
                    "StartTransientUnit",
                    None,
                    SIG,
                    ARGS,
                )
            assert caught.value.name == expect and "already exists" in caught.value.message
        else:
            assert conn.call("/", "x.y", "z") == expect
    finally:
        conn.close()
        t.join(5)
        server.close()
