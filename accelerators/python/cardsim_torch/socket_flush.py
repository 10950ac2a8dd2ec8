"""Waits until the bytes this process wrote to its TCP connections have reached the peers.

Gloo calls a send complete once its bytes are in the kernel's send queue. When a group is
destroyed its connections close; a close that finds unread bytes (or bytes arriving after
it) resets the connection, and what the kernel had not delivered yet is dropped: the peer's
receive fails with "Connection reset by peer". A rank that
sends and then ends (its group destroyed at exit) would make its peer's matching receive
fail at random. With the vendor's library a completed send has been delivered, so a group's
end first waits (bounded) until its Gloo connections' send queues are empty: each byte
acknowledged by the peer's kernel, which hands it to the peer even after the reset. The
connections are told apart by their sockets' inodes (those a group's Gloo opened: tcp_sockets()
before and after), so the program's own connections never delay it.
"""
from __future__ import annotations

import fcntl
import os
import socket
import stat
import struct
import termios
import time

# SIOCOUTQ (the same number as TIOCOUTQ): bytes written to a TCP socket not yet acknowledged.
_SIOCOUTQ = termios.TIOCOUTQ


def tcp_sockets() -> dict[int, int]:
    """The process's open TCP sockets: {inode: fd}."""
    out = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:   # no procfs: nothing can be waited for
        return out
    for name in names:
        fd = int(name)
        try:
            st = os.fstat(fd)
            if not stat.S_ISSOCK(st.st_mode):
                continue
            dup = os.dup(fd)
        except OSError:   # closed meanwhile (the listing's own fd among them)
            continue
        try:
            s = socket.socket(fileno=dup)
        except (OSError, ValueError):   # a socket Python cannot wrap: not Gloo's
            os.close(dup)
            continue
        with s:
            if s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM:
                out[st.st_ino] = fd
    return out


def unsent_bytes(fd: int) -> int:
    """Bytes written to TCP socket `fd` that its peer has not acknowledged (0 if unknown)."""
    try:
        return struct.unpack("i", fcntl.ioctl(fd, _SIOCOUTQ, b"\0" * 4))[0]
    except OSError:
        return 0


def wait_tcp_sent(timeout_s: float, sockets=None) -> bool:
    """Waits up to timeout_s until none of the TCP sockets with inodes in `sockets` (every TCP
    socket of the process when None) holds unacknowledged bytes; True when none does."""
    deadline = time.monotonic() + timeout_s
    fds = [fd for ino, fd in tcp_sockets().items() if sockets is None or ino in sockets]
    while True:
        fds = [fd for fd in fds if unsent_bytes(fd) > 0]
        if not fds:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
