"""Print the exact command to type on each node when there is no scheduler.

    python -m hpc_imagenet.launch.manual --nnodes 2 --nproc-per-node 4 --master-addr 192.168.100.11 \\
        [--master-port 8888] [--launcher torchrun|launch|dist-url|mpi] \\
        -- imagenet/imagenet_ddp_apex.py -a resnet50 --b 208 --workers 20 --opt-level O2 /data/imagenet

prints, for node 0..N-1, the command to run there, plus a check each other node runs first to
prove it reaches the master (``python -m hpc_imagenet.launch.manual --check HOST:PORT``). ``--hostfile FILE``
(one host per line) prints an ``mpirun`` line with the matching hostfile instead. Every argument
is shell-quoted, so paths with spaces or quotes survive copy and paste.
"""
from __future__ import annotations

import argparse
import logging
import shlex
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from hpc_imagenet.launch import launchers
from hpc_imagenet.launch.ports import DEFAULT_PORT
log = logging.getLogger(__name__)

MPI = next(name for name in launchers.by_hand() if launchers.get(name).hostfile)  # the default with --hostfile
MPI_FLAVOURS = ("openmpi", "mpich")


class ManualError(ValueError):
    """Bad arguments; the message says what to change."""


@dataclass(frozen=True)
class Plan:
    """Everything the printed commands depend on."""

    nnodes: int
    nproc_per_node: Optional[int]
    master_addr: str
    master_port: int
    launcher: str
    script: Tuple[str, ...]  # the training script and its arguments
    python: str = "python"
    hosts: Tuple[str, ...] = ()
    mpi: str = "openmpi"

    @property
    def procs(self) -> int:
        return self.nproc_per_node or 1


# ----------------------------------------------------------------------------- per-node commands

def _url_host(addr: str) -> str:
    return f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr


def node_command(plan: Plan, node: int) -> List[str]:
    """The argv to run on node NODE (0 is the master): the launcher table's command for one node."""
    entry = launchers.get(plan.launcher)
    if entry.flags is None:
        raise ManualError(f"no per-node command for --launcher {plan.launcher}")
    layout = launchers.Node(str(plan.nnodes), str(plan.nproc_per_node or ""), plan.master_addr,
                            str(plan.master_port), node_rank=str(node))
    return entry.node_command(layout, plan.python, plan.script)


def check_command(plan: Plan) -> List[str]:
    return [plan.python, "-m", "hpc_imagenet.launch.manual", "--check",
            f"{_url_host(plan.master_addr)}:{plan.master_port}"]


def render_nodes(plan: Plan) -> str:
    """Comment lines (#) and one command line per step, for every node."""
    if plan.nproc_per_node:
        size = f"{plan.nnodes} node(s) x {plan.procs} process(es) = {plan.nnodes * plan.procs} processes"
    else:
        size = f"{plan.nnodes} node(s) x one process per GPU"
    lines = [f"# {size}; master {plan.master_addr}:{plan.master_port} (node 0). Run each block on its node, "
             "node 0 first, from the same directory."]
    if plan.master_addr.startswith("127.") and plan.nnodes > 1:
        lines.append(f"# note: {plan.master_addr} is a loopback address; it works only when every 'node' is "
                     "this machine. Give node 0's address as the other nodes see it.")
    for node in range(plan.nnodes):
        where = f"node {node} ({plan.master_addr})" if node == 0 else f"node {node}"
        lines.append(f"# --- {where}")
        if node:
            lines.append("# check that this node reaches the master (node 0 must be running), then start:")
            lines.append(shlex.join(check_command(plan)))
        lines.append(shlex.join(node_command(plan, node)))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- mpirun + hostfile

def read_hostfile(path: str) -> Tuple[str, ...]:
    """One host per line; blank lines and # comments ignored; 'host slots=4' keeps the host."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ManualError(f"cannot read --hostfile {path}: {e.strerror or e}") from None
    hosts = tuple(line.split("#", 1)[0].split()[0] for line in text.splitlines() if line.split("#", 1)[0].strip())
    if not hosts:
        raise ManualError(f"--hostfile {path} lists no hosts: write one host name or address per line")
    if len(set(hosts)) != len(hosts):
        raise ManualError(f"--hostfile {path} lists a host twice; list each node once")
    return hosts


def mpi_hostfile_lines(plan: Plan) -> List[str]:
    if plan.mpi == "openmpi":
        return [f"{host} slots={plan.procs}" for host in plan.hosts]
    return [f"{host}:{plan.procs}" for host in plan.hosts]


def mpirun_command(plan: Plan, hostfile: str) -> List[str]:
    n, per = len(plan.hosts) * plan.procs, plan.procs
    if plan.mpi == "openmpi":
        head = ["mpirun", "-np", str(n), "--hostfile", hostfile, "--map-by", f"ppr:{per}:node"]
    else:
        head = ["mpiexec", "-n", str(n), "-f", hostfile, "-ppn", str(per)]
    return [*head, plan.python, "-m", "hpc_imagenet.launch.mpi", *plan.script]


def render_mpi(plan: Plan, hostfile: str) -> str:
    hosts = " ".join(shlex.quote(h) for h in plan.hosts)
    return "\n".join([
        f"# {len(plan.hosts)} node(s) x {plan.procs} rank(s) = {len(plan.hosts) * plan.procs} ranks with "
        f"{plan.mpi}; hpc_imagenet.launch.mpi finds rank 0's address and a free port itself.",
        "# check that every host accepts ssh without a password:",
        f'for h in {hosts}; do ssh -o BatchMode=yes "$h" true || echo "cannot ssh to $h"; done',
        f"# write the hostfile, then start everything from {shlex.quote(plan.hosts[0])} "
        "(same directory on every node):",
        shlex.join(["printf", r"%s\n", *mpi_hostfile_lines(plan)]) + " > " + shlex.quote(hostfile),
        shlex.join(mpirun_command(plan, hostfile)),
    ]) + "\n"


# ----------------------------------------------------------------------------- reachability check

def parse_endpoint(text: str) -> Tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ManualError(f"--check wants HOST:PORT (e.g. 192.168.100.11:29500), got {text!r}")
    return host, int(port)


def check_reachable(host: str, port: int, timeout_s: float) -> str:
    """Connect to the master's port, retrying until TIMEOUT_S (node 0 may still be starting)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(5.0, max(timeout_s, 0.1))):
                return f"ok: {socket.gethostname()} reaches {host}:{port}"
        except OSError as e:
            reason = e.strerror or str(e) or type(e).__name__
            if time.monotonic() >= deadline:
                raise ManualError(f"cannot reach {host}:{port} from {socket.gethostname()} ({reason}): start "
                                  "node 0 first, give its address as this node sees it, and open the port "
                                  "in the firewall") from None
            time.sleep(0.5)


# ----------------------------------------------------------------------------- command line

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hpc_imagenet.launch.manual", description="Print the exact command to run on each node.",
        epilog="Everything after -- is the training script and its arguments.")
    p.add_argument("--nnodes", type=int, help="number of nodes (default: the hostfile's length)")
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int,
                   help="processes (GPUs) per node (dist-url default: the script uses every GPU)")
    p.add_argument("--master-addr", "--master_addr", help="node 0's address as the other nodes see it")
    p.add_argument("--master-port", "--master_port", type=int, default=DEFAULT_PORT, help="a free port on node 0")
    p.add_argument("--launcher", choices=launchers.by_hand(),
                   help="; ".join(f"{n}: {launchers.get(n).summary}" for n in launchers.by_hand())
                   + f". Default: torchrun ({MPI}, one mpirun line, with --hostfile)")
    p.add_argument("--hostfile", help="one host per line: print an mpirun line for them")
    p.add_argument("--mpi", choices=MPI_FLAVOURS, default="openmpi", help="hostfile syntax and launcher")
    p.add_argument("--mpi-hostfile", default="hostfile.mpi", help="name of the hostfile the mpirun line uses")
    p.add_argument("--python", default="python", help="the Python to run on the nodes")
    p.add_argument("--node", type=int, help="print only this node's command (for scripts)")
    p.add_argument("--check", metavar="HOST:PORT", help="test that this node reaches the master, then exit")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds --check keeps trying")
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS...]")
    return p


def _script(args: argparse.Namespace, launcher: str) -> Tuple[str, ...]:
    script = list(args.script)
    if script[:1] == ["--"]:
        script = script[1:]
    if not script:
        raise ManualError("no training script: end the command with -- SCRIPT ARGS, e.g. "
                          "-- imagenet/imagenet_ddp.py -a resnet50 /data/imagenet")
    for flag in launchers.get(launcher).script_flags:
        if any(a == flag or a.startswith(flag + "=") for a in script[1:]):
            raise ManualError(f"remove {flag} from the script's arguments: the per-node commands set it")
    return tuple(script)


def plan_from_args(args: argparse.Namespace) -> Plan:
    launcher = args.launcher or (MPI if args.hostfile else "torchrun")
    hosts = read_hostfile(args.hostfile) if args.hostfile else ()
    entry = launchers.get(launcher)
    if entry.hostfile and not hosts:
        raise ManualError(f"--launcher {launcher} needs --hostfile FILE (one host per line)")
    if hosts and not entry.hostfile:
        raise ManualError(f"--hostfile prints an mpirun line; drop --launcher {launcher} or the hostfile")
    nnodes = args.nnodes or len(hosts)
    if hosts and nnodes != len(hosts):
        raise ManualError(f"--nnodes {nnodes} but --hostfile lists {len(hosts)} hosts; drop --nnodes")
    if nnodes < 1:
        raise ManualError("--nnodes must be at least 1 (the number of machines)")
    if args.nproc_per_node is not None and args.nproc_per_node < 1:
        raise ManualError("--nproc-per-node must be at least 1 (usually the GPUs per node)")
    if args.nproc_per_node is None and (entry.hostfile or entry.agent):
        raise ManualError("--nproc-per-node is required: the number of GPUs on each node")
    if not 0 < args.master_port < 65536:
        raise ManualError(f"--master-port {args.master_port} is not in 1-65535")
    master = args.master_addr or (hosts[0] if hosts else None)
    if not master:
        raise ManualError("--master-addr is required: node 0's IP address as the other nodes see it "
                          "(`hostname -I` on node 0)")
    return Plan(nnodes, args.nproc_per_node, master, args.master_port, launcher, _script(args, launcher),
                args.python, hosts, args.mpi)


def render(args: argparse.Namespace) -> str:
    plan = plan_from_args(args)
    if launchers.get(plan.launcher).hostfile:
        return render_mpi(plan, args.mpi_hostfile)
    if args.node is not None:
        if not 0 <= args.node < plan.nnodes:
            raise ManualError(f"--node {args.node} is not in 0..{plan.nnodes - 1}")
        return shlex.join(node_command(plan, args.node)) + "\n"
    return render_nodes(plan)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.check:
            print(check_reachable(*parse_endpoint(args.check), args.timeout), flush=True)
        else:
            sys.stdout.write(render(args))
    except ManualError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from hpc_imagenet.launch.manual import main  # under its one name, not a copy
    sys.exit(main())
