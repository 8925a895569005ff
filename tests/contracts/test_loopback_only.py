"""The test suite connects only to loopback (issue 63): conftest.py refuses every connection a
Python socket of the test's process opens elsewhere, and fails the test during which it was
tried. (Addresses here: documentation ranges, RFC 5737 and RFC 3849; a name under ``.invalid``.
None is ever reached: the guard refuses before the socket call.)"""

import errno
import socket
from pathlib import Path

import pytest

ROOT_CONFTEST = Path(__file__).resolve().parents[2] / "conftest.py"

OFF = [
    ("connect", socket.AF_INET, socket.SOCK_STREAM, ("192.0.2.1", 9)),
    ("connect_ex", socket.AF_INET, socket.SOCK_STREAM, ("10.255.255.1", 9)),
    ("connect", socket.AF_INET, socket.SOCK_STREAM, ("no-such-host.invalid", 9)),
    ("sendto", socket.AF_INET, socket.SOCK_DGRAM, ("198.51.100.7", 53)),
    ("connect", socket.AF_INET6, socket.SOCK_STREAM, ("2001:db8::1", 9, 0, 0)),
]


def _guard(config):
    """The project root's conftest module, as pytest loaded it (``sys.modules["conftest"]`` is
    whichever conftest.py was imported last under that name: tests/accelerator's, in a worker
    that collected it)."""
    for module in config.pluginmanager.get_plugins():
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == ROOT_CONFTEST:
            return module
    raise AssertionError(f"{ROOT_CONFTEST} is not imported")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_connection_outside_loopback_is_refused_and_recorded_for_the_test(pytestconfig):
    guard = _guard(pytestconfig)
    assert hasattr(guard, "OFF_LOOPBACK"), "conftest.py has no loopback guard"
    for call, family, kind, address in OFF:
        if family == socket.AF_INET6 and not socket.has_ipv6:
            continue
        with socket.socket(family, kind) as sock, pytest.raises(guard.OffLoopbackError) as err:
            if call == "sendto":
                sock.sendto(b"x", address)
            else:
                getattr(sock, call)(address)
        assert repr(address) in str(err.value) and "closed loopback port" in str(err.value)
    with pytest.raises(guard.OffLoopbackError):  # and what is built on connect
        socket.create_connection(("192.0.2.1", 9), timeout=1)
    recorded = list(guard.OFF_LOOPBACK)
    guard.OFF_LOOPBACK.clear()  # this test's own tries: they are not to fail it
    assert len(recorded) == sum(1 for o in OFF if o[1] == socket.AF_INET or socket.has_ipv6) + 1
    assert all("test_a_connection_outside_loopback_is_refused" in line for line in recorded)


def test_loopback_connections_go_through_as_the_system_answers_them(pytestconfig):
    guard = _guard(pytestconfig)
    port = _closed_port()
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", port))
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.9", port)) == errno.ECONNREFUSED  # all of 127.0.0.0/8
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        assert sock.sendto(b"x", ("localhost", port)) == 1
    with socket.create_server(("127.0.0.1", 0)) as server:
        socket.create_connection(server.getsockname(), timeout=5).close()
    assert guard.OFF_LOOPBACK == []
    assert all(guard.on_loopback(a) for a in [("::1", 1), ("::ffff:127.0.0.1", 1), ("0.0.0.0", 1), "/tmp/sock"])  # fmt: skip


def test_the_test_that_connected_outside_loopback_fails(pytestconfig):
    """What the autouse fixture does at each test's end, with one refused connection recorded
    (a caller that caught the refusal and went on still fails its test)."""
    guard = _guard(pytestconfig)
    guard.OFF_LOOPBACK.append("tests/x.py::test_y: ('10.0.0.1', 80)")
    with pytest.raises(pytest.fail.Exception, match=r"connected outside loopback: .*10\.0\.0\.1"):
        guard.fail_off_loopback()
    assert guard.OFF_LOOPBACK == []
