"""cardsim_torch.socket_flush: a group's end waits until what the process wrote to its TCP
connections has been acknowledged by the peers (Gloo calls a send done once its bytes are
in the kernel; a connection closed or reset before they left would drop them)."""
import socket
import threading
import time

from cardsim_torch import socket_flush


def _connected_pair():
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    return client, server


def test_bytes_the_peer_has_not_taken_are_waited_for_until_it_reads_them():
    client, server = _connected_pair()
    try:
        client.setblocking(False)
        sent = 0
        try:   # fill the peer's receive window and our send queue (the peer reads nothing)
            while True:
                sent += client.send(b"x" * 65536)
        except BlockingIOError:
            pass
        assert socket_flush.unsent_bytes(client.fileno()) > 0
        t0 = time.monotonic()
        assert not socket_flush.wait_tcp_sent(0.2)       # still queued: gives up at the limit
        assert 0.2 <= time.monotonic() - t0 < 5

        got = 0

        def reader():
            nonlocal got
            while got < sent:
                got += len(server.recv(1 << 20))
        th = threading.Thread(target=reader, daemon=True)
        th.start()
        assert socket_flush.wait_tcp_sent(30)
        assert socket_flush.unsent_bytes(client.fileno()) == 0
        th.join(30)
        assert got == sent
    finally:
        client.close()
        server.close()


def test_only_the_sockets_named_are_waited_for():
    """A group waits for its own Gloo connections, never for the program's other ones."""
    ours, peer = _connected_pair()
    other, other_peer = _connected_pair()
    try:
        other.setblocking(False)
        try:   # the program's connection keeps unacknowledged bytes (its peer reads nothing)
            while True:
                other.send(b"y" * 65536)
        except BlockingIOError:
            pass
        assert socket_flush.unsent_bytes(other.fileno()) > 0
        inodes = {ino for ino, fd in socket_flush.tcp_sockets().items() if fd in (ours.fileno(), peer.fileno())}
        assert len(inodes) == 2
        t0 = time.monotonic()
        assert socket_flush.wait_tcp_sent(10, inodes)
        assert time.monotonic() - t0 < 5
        assert not socket_flush.wait_tcp_sent(0.1)   # all of them: the other one holds bytes
    finally:
        for s in (ours, peer, other, other_peer):
            s.close()


def test_idle_connections_cost_no_wait():
    client, server = _connected_pair()
    try:
        client.sendall(b"hello")
        assert server.recv(16) == b"hello"
        t0 = time.monotonic()
        assert socket_flush.wait_tcp_sent(10)
        assert time.monotonic() - t0 < 5
    finally:
        client.close()
        server.close()
