# SPDX-License-Identifier: Apache-2.0
"""Network namespaces for ranks that must talk over a real network: a bridge
in a hub namespace and one namespace per rank linked to it by a veth pair,
the rank's end named eth0 with SUBNET.(rank+1)/24. Used by the merge e2e
test and by make eval's communication scenarios (ranks run with
GLOO_SOCKET_IFNAME=eth0). Names are unique per use; delete() removes
whatever create() made, a namespace's links with it. Needs root."""
import os
import shutil
import subprocess
import uuid

IP = shutil.which("ip") or "/usr/sbin/ip"


def ip(*args):
    subprocess.run([IP, *args], check=True, capture_output=True, text=True)


class Namespaces:
    def __init__(self, n, prefix="eacgm", subnet="10.213.0"):
        tag = "%s%d-%s" % (prefix, os.getpid(), uuid.uuid4().hex[:6])
        self.hub, self.ranks = tag + "-hub", ["%s-r%d" % (tag, r) for r in range(n)]
        self.subnet = subnet
        self.made = []

    def create(self):
        ip("netns", "add", self.hub)
        self.made.append(self.hub)
        ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        ip("-n", self.hub, "link", "set", "br0", "up")
        for r, ns in enumerate(self.ranks):
            ip("netns", "add", ns)
            self.made.append(ns)
            # Made inside the namespaces: the machine's own links are not touched.
            ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", "p%d" % r, "netns", self.hub)
            ip("-n", self.hub, "link", "set", "p%d" % r, "master", "br0", "up")
            ip("-n", ns, "addr", "add", "%s.%d/24" % (self.subnet, r + 1), "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def delete(self):
        for ns in reversed(self.made):
            subprocess.run([IP, "netns", "del", ns], capture_output=True)
