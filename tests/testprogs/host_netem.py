# SPDX-License-Identifier: Apache-2.0
"""A user-space stand-in for `tc qdisc ... netem delay D loss P`, for kernels
built without sch_netem (this project's VM): packets sent to an iptables
NFQUEUE are held for D ms, then accepted, or dropped with probability P.
Standard library only (raw netfilter netlink).

  host_netem.py QUEUE DELAY_MS LOSS      e.g. 7 20 0.02; prints "ready" once bound

Use: iptables -A OUTPUT -o DEV -j NFQUEUE --queue-num QUEUE (in the sender's
network namespace, where this runs too). Stops on SIGTERM.
"""
import heapq
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS = 1, 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST = 1
NLMSG_ERROR = 2


def attr(kind, payload):
    a = struct.pack("=HH", 4 + len(payload), kind) + payload
    return a + b"\0" * (-len(a) % 4)


def message(msg_type, queue, attrs):
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + b"".join(attrs)
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg_type, NLM_F_REQUEST, 0, 0) + body


def packet_ids(data):
    """Packet ids of the NFQNL_MSG_PACKET messages in one netlink read."""
    off = 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if length < 16:
            break
        if kind == NLMSG_ERROR:
            err = struct.unpack_from("=i", data, off + 16)[0]
            if err:
                sys.exit("netlink error %d (is the NFQUEUE target available?)" % err)
        elif kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            a = off + 20  # nlmsghdr + nfgenmsg
            while a + 4 <= off + length:
                alen, akind = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                if akind & 0x7FFF == NFQA_PACKET_HDR:
                    yield struct.unpack_from("!I", data, a + 4)[0]
                a += (alen + 3) & ~3
        off += (length + 3) & ~3


def main():
    queue, delay, loss = int(sys.argv[1]), float(sys.argv[2]) / 1000, float(sys.argv[3])
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((0, 0))
    s.send(message(NFQNL_MSG_CONFIG, queue, [attr(NFQA_CFG_CMD, struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, 0))]))
    s.send(message(NFQNL_MSG_CONFIG, queue, [attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))]))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    held = []  # (due, packet id, verdict)
    while True:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else None
        if select.select([s], [], [], timeout)[0]:
            now = time.monotonic()
            for pid in packet_ids(s.recv(1 << 20)):
                verdict = NF_DROP if random.random() < loss else NF_ACCEPT
                heapq.heappush(held, (now + delay, pid, verdict))
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, pid, verdict = heapq.heappop(held)
            s.send(message(NFQNL_MSG_VERDICT, queue, [attr(NFQA_VERDICT_HDR, struct.pack("!II", verdict, pid))]))


if __name__ == "__main__":
    main()
