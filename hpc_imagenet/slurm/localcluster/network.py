"""The local cluster's network: a bridge on the host (the controller's address) and, per node, a
network namespace joined to it by a veth pair, with its own address. Every name derives from the
cluster's id (:class:`Layout`), so teardown, and reaping a cluster whose owner died, removes exactly
what one cluster made: the processes left in its namespaces, the namespaces, veths and bridge.

A node's processes run through :func:`in_node`: ``nsenter --net`` into its namespace, then
``unshare --mount --uts`` for its own hostname and a bind mount of the cluster's hosts file over
/etc/hosts. (``ip netns exec`` remounts /sys, and slurmd then dies: "No filesystem mounted on
/sys/fs/cgroup".)
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Dict, List, Mapping, Sequence

from hpc_imagenet.slurm.localcluster.commands import ClusterError, ClusterUnavailable, sh, wait_for

NETNS_DIR = Path("/run/netns")


@dataclass
class Layout:
    """Names and addresses of one cluster; all derived from its id so teardown can find them."""

    cid: str
    nodes: int
    subnet: str  # first three octets, e.g. "10.213.7"
    base: Path

    @property
    def bridge(self) -> str:
        return f"hisl{self.cid}br"

    def netns(self, index: int) -> str:
        return f"hisl-{self.cid}-node{index}"

    def veth(self, index: int) -> str:
        return f"hisl{self.cid}v{index}"

    @property
    def controller_ip(self) -> str:
        return f"{self.subnet}.1"

    def node_ip(self, index: int) -> str:
        return f"{self.subnet}.{10 + index}"

    @property
    def node_names(self) -> List[str]:
        return [f"node{index}" for index in range(1, self.nodes + 1)]


def node_index(name: str) -> int:
    """node3 -> 3."""
    return int(name.removeprefix("node"))


def free_subnet(reserved: Collection[str] = ()) -> str:
    """A 10.213.x subnet no address or route of the host uses, and not in RESERVED (chosen by a
    cluster that has not made its network yet)."""
    used = sh(["ip", "-o", "-4", "addr"]).stdout + sh(["ip", "-4", "route"]).stdout
    for third in [secrets.randbelow(200) + 20 for _ in range(50)]:
        subnet = f"10.213.{third}"
        if f"{subnet}." not in used and subnet not in reserved:
            return subnet
    raise ClusterUnavailable("no free 10.213.x.0/24 subnet")


def make_network(lay: Layout) -> None:
    sh(["ip", "link", "add", lay.bridge, "type", "bridge"])
    sh(["ip", "addr", "add", f"{lay.controller_ip}/24", "dev", lay.bridge])
    sh(["ip", "link", "set", lay.bridge, "up"])
    for index in range(1, lay.nodes + 1):
        ns, veth = lay.netns(index), lay.veth(index)
        sh(["ip", "netns", "add", ns])
        sh(["ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p"])
        sh(["ip", "link", "set", veth, "master", lay.bridge, "up"])
        sh(["ip", "link", "set", f"{veth}p", "netns", ns])
        sh(["ip", "-n", ns, "link", "set", f"{veth}p", "name", "eth0"])
        sh(["ip", "-n", ns, "addr", "add", f"{lay.node_ip(index)}/24", "dev", "eth0"])
        sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
        sh(["ip", "-n", ns, "link", "set", "lo", "up"])  # gloo and c10d also talk over loopback
        sh(["ip", "-n", ns, "route", "add", "default", "via", lay.controller_ip])


def set_link(lay: Layout, index: int, up: bool) -> None:
    """Node INDEX's cable in or out: its veth on the bridge side up or down (no RST, no FIN)."""
    sh(["ip", "link", "set", lay.veth(index), "up" if up else "down"])


def in_node(lay: Layout, index: int, cmd: Sequence[str]) -> List[str]:
    """Wrap ``cmd`` (shell words) to run as node INDEX: its network namespace, hostname and /etc/hosts."""
    inner = (f"mount --bind {lay.base}/etc/hosts /etc/hosts && "
             f"mount --bind {lay.base}/etc/resolv.conf /etc/resolv.conf && hostname node{index} && exec "
             + " ".join(cmd))
    return ["nsenter", f"--net={NETNS_DIR / lay.netns(index)}", "unshare", "--mount", "--uts", "sh", "-c", inner]


def netns_inodes(lay: Layout, indices: Sequence[int] = ()) -> Dict[int, str]:
    """inode -> name of the cluster's namespaces (only INDICES' where given) that exist."""
    inodes = {}
    for index in indices or range(1, lay.nodes + 1):
        path = NETNS_DIR / lay.netns(index)
        if path.exists():
            inodes[path.stat().st_ino] = lay.netns(index)
    return inodes


def pids_in_namespaces(inodes: Mapping[int, str]) -> List[int]:
    """The processes whose network namespace is one of INODES."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "ns" / "net").stat().st_ino in inodes:
                    pids.append(int(entry.name))
            except OSError:
                continue  # exited meanwhile, or a kernel thread
    return pids


def kill_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def teardown_layout(lay: Layout) -> None:
    """Kill every process still inside our namespaces, then delete namespaces, bridge and files."""
    inodes = netns_inodes(lay)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids_in_namespaces(inodes) if inodes else []:
            kill_pid(pid, sig)
        try:
            wait_for("processes in the node namespaces to exit", lambda: not pids_in_namespaces(inodes), 10)
            break
        except ClusterError:
            continue
    for index in range(1, lay.nodes + 1):
        sh(["ip", "netns", "delete", lay.netns(index)], check=False)
        sh(["ip", "link", "delete", lay.veth(index)], check=False)
    sh(["ip", "link", "delete", lay.bridge], check=False)
    shutil.rmtree(lay.base, ignore_errors=True)
