"""Loads for the host layer's end-to-end tests (tests/e2e/test_host.py).

  host_load.py spin SECONDS              burn one CPU for SECONDS of wall time
  host_load.py sink HOST PORT            accept one TCP connection, read it to
                                         the end; prints "ready" once listening
  host_load.py send HOST PORT SECONDS RATE
                                         connect, send for SECONDS at RATE
                                         bytes/s (paced: no queue overflows),
                                         close; prints "sent N" (bytes)
"""
import socket
import sys
import time


def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def sink(host, port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(1)
    print("ready", flush=True)
    conn, _ = ls.accept()
    total = 0
    while True:
        b = conn.recv(1 << 16)
        if not b:
            break
        total += len(b)
    conn.close()
    print("received %d" % total, flush=True)


def send(host, port, seconds, rate):
    s = socket.create_connection((host, port))
    buf = b"x" * 8192
    total = 0
    start = time.monotonic()
    while time.monotonic() < start + seconds:
        total += s.send(buf)
        ahead = start + total / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    # Wait until the sink has read everything (it closes then), so that
    # every segment and retransmit falls inside the recording.
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()
    print("sent %d" % total, flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "spin":
        spin(float(sys.argv[2]))
    elif cmd == "sink":
        sink(sys.argv[2], int(sys.argv[3]))
    elif cmd == "send":
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
    else:
        sys.exit("unknown command %r" % cmd)
