"""A real SLURM cluster on one machine: munged, MariaDB + slurmdbd, slurmctld, and one slurmd per
node, each node in its own network namespace (own address, hostname and /etc/hosts) with fake GPUs.

Usage::

    with SlurmCluster(nodes=4) as cluster:
        cluster.run(["sbatch", "--wait", "--wrap", "hostname"])

Every resource is named after a per-cluster id and recorded in a state file under /run, so
:meth:`SlurmCluster.stop` (and :func:`reap_stale` after a crash) removes exactly what this cluster
made: the daemons it started, the processes left in its namespaces, the namespaces, veths and
bridge. The network is :mod:`hpc_imagenet.slurm.localcluster.network`, the files
:mod:`hpc_imagenet.slurm.localcluster.config`,
the supporting daemons :mod:`hpc_imagenet.slurm.localcluster.daemons`.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from hpc_imagenet.slurm import client
from hpc_imagenet.slurm.localcluster import daemons, network
from hpc_imagenet.slurm.localcluster.commands import SLURM_SBIN, ClusterError, ClusterUnavailable, sh, which, wait_for
from hpc_imagenet.slurm.localcluster.config import Shape, write_configs
from hpc_imagenet.slurm.localcluster.network import Layout, node_index
from hpc_imagenet.slurm.localcluster.packages import ensure_packages

log = logging.getLogger(__name__)

STATE_DIR = Path("/run/hpc-imagenet-slurm")  # one JSON per live cluster, for reap_stale()
REQUIRE_ENV = "HPC_IMAGENET_REQUIRE_SLURM"  # CI sets it: a cluster that cannot start is an error
KEEP_LOGS_ENV = "HPC_IMAGENET_KEEP_SLURM_LOGS"  # set: teardown copies the daemon logs there (a folder)

FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE"}


def unavailable_reason() -> Optional[str]:
    """Why this machine cannot host the cluster, or None when it can (before installing)."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (network namespaces, bridge, daemons running as root)"
    for tool in ("ip", "nsenter", "unshare", "mknod"):
        if not which(tool):
            return f"needs the {tool!r} command (iproute2 / util-linux)"
    probe = f"hisl-probe-{os.getpid()}"
    made = sh(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"cannot create network namespaces: {made.stderr.strip()}"
    sh(["ip", "netns", "delete", probe], check=False)
    if not which("slurmctld") and not which("apt-get"):
        return "SLURM is not installed and there is no apt-get to install it"
    return None


@dataclass
class SlurmCluster:
    """Start with :meth:`start` (or ``with``); stop with :meth:`stop`, which removes everything."""

    nodes: int = 4
    gpus_per_node: int = 4
    cpus_per_node: int = 32
    memory_mb: int = 256_000
    accounting: bool = True
    kill_wait: int = 15  # seconds between SIGTERM and SIGKILL: the trainers' checkpoint window
    name: str = "hpctest"
    layout: Optional[Layout] = None
    procs: Dict[str, subprocess.Popen] = field(default_factory=dict)
    ports: Dict[str, int] = field(default_factory=dict)
    _state_file: Optional[Path] = None

    # ---- starting and stopping

    def start(self) -> "SlurmCluster":
        reason = unavailable_reason()
        if reason:
            raise ClusterUnavailable(reason)
        ensure_packages(self.accounting)
        reap_stale()
        with _state_lock():  # clusters started at once (one per pytest worker) pick different subnets
            self.layout = self._make_layout(reserved=_live_subnets())
            self._record_state()
        try:
            self._start_all()
        except ClusterError as exc:
            logs = self.logs()
            self.stop()
            raise ClusterError(f"{exc}\n{logs}") from None
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Cancel jobs, stop our daemons, kill what is left in our namespaces, delete the network."""
        if self.layout is None:
            return
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self._drain_jobs()
        for name in reversed(list(self.procs)):
            daemons.terminate(self.procs[name], name)
        self.procs.clear()
        self._keep_logs()
        network.teardown_layout(self.layout)
        if self._state_file:
            self._state_file.unlink(missing_ok=True)
        self.layout = None

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- what clients need

    @property
    def conf(self) -> Path:
        assert self.layout, "cluster not started"
        return self.layout.base / "etc" / "slurm.conf"

    @property
    def env(self) -> Dict[str, str]:
        """os.environ plus SLURM_CONF (and the sbin dirs on PATH) for client commands."""
        path = os.pathsep.join([os.environ.get("PATH", ""), *SLURM_SBIN])
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": path}

    def run(self, cmd: Sequence[str], check: bool = True, timeout: float = 120,
            cwd: Optional[os.PathLike] = None, env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
        """Run a client command (sbatch, squeue, ...) against this cluster."""
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env={**self.env, **(env or {})})
        if check and proc.returncode != 0:
            raise ClusterError(f"{' '.join(map(str, cmd))} exited {proc.returncode}: "
                               f"{(proc.stderr or proc.stdout).strip()}")
        return proc

    def node_ip(self, name: str) -> str:
        assert self.layout
        return self.layout.node_ip(node_index(name))

    def node_command(self, name: str, cmd: Sequence[str]) -> List[str]:
        """CMD wrapped to run on node NAME outside SLURM (its namespace, hostname, /etc/hosts): a
        stand-in for any other kind of host, such as a Kubernetes pod."""
        assert self.layout
        return network.in_node(self.layout, node_index(name), [shlex.quote(str(word)) for word in cmd])

    # ---- jobs

    def job_state(self, job_id: str) -> Dict[str, str]:
        """``scontrol show job`` as a dict (JobState, ExitCode, Restarts, NodeList, ...)."""
        out = self.run(["scontrol", "-o", "show", "job", job_id], check=False).stdout
        return dict(token.split("=", 1) for token in out.split() if "=" in token)

    def job_nodes(self, job_id: str) -> List[str]:
        """The node names of JOB's current allocation, in order (rank 0's node first)."""
        return self.hostnames(self.job_state(job_id)["NodeList"])

    def hostnames(self, nodelist: str) -> List[str]:
        """``node[1-2]`` -> node1, node2."""
        return self.run(["scontrol", "show", "hostnames", nodelist]).stdout.split()

    def sacct(self, job_id: str) -> List[Dict[str, str]]:
        """Accounting rows for a job and its steps, every run of a requeued job (-D) oldest first."""
        return client.accounting(job_id, self.env)

    def wait_finished(self, job_id: str, timeout: float = 60, runs: int = 1) -> Dict[str, str]:
        """The job's last accounting row once it left the queue and reached a final state (accounting
        lags the job a little). ``runs``: how many runs to expect (a requeued job has one row each)."""
        def final() -> Optional[Dict[str, str]]:
            if client.in_queue(job_id, self.env):
                return None
            rows = [row for row in self.sacct(job_id) if row["JobID"] == job_id]
            done = len(rows) >= runs and rows[-1]["State"].split()[0] in FINAL_STATES
            return rows[-1] if done else None
        return wait_for(f"job {job_id} in accounting", final, timeout, interval=0.5)

    def wait_idle(self, timeout: float = 60) -> None:
        """Until no job is queued or running and every node is idle."""
        wait_for("an empty queue", lambda: not client.active(self.env), timeout)
        wait_for("idle nodes", self._all_nodes_idle, timeout)

    def wait_node_idle(self, node: str, timeout: float = 300) -> None:
        """Until NODE alone is idle (after a fault, a job may stay COMPLETING until slurmctld hears from the
        node's restarted slurmd, which a loaded machine can delay up to SlurmdTimeout, 120 s, and beyond);
        the other nodes may be busy with other jobs."""
        wait_for(f"{node} to be idle again", lambda: self._node_states().get(node) == "idle", timeout)

    # ---- faults a scenario injects

    def start_slurmd(self, node: str) -> None:
        """Start NODE's slurmd (again, after a fault killed it: it finds its running job steps)."""
        (self.layout.base / "spool" / f"slurmd.{node}").mkdir(exist_ok=True)
        self._spawn(node, network.in_node(self.layout, node_index(node),
                                          ["slurmd", "-D", "-f", str(self.conf), "-N", node]))

    def kill_slurmd(self, node: str) -> None:
        """SIGKILL NODE's slurmd only (nsenter, unshare and sh exec it: the pid we started is slurmd)."""
        self.procs[node].kill()
        self.procs[node].wait(10)

    def fail_node(self, node: str, reason: str = "node failure (test)") -> int:
        """A node dies: SIGKILL its slurmd and every process in its namespace (job steps, trainers),
        then mark it DOWN, as slurmctld does when a dead node stops answering (after SlurmdTimeout,
        too long to wait for). Returns how many processes were killed."""
        self.kill_slurmd(node)
        pids = network.pids_in_namespaces(network.netns_inodes(self.layout, [node_index(node)]))
        for pid in pids:
            network.kill_pid(pid, signal.SIGKILL)
        self.run(["scontrol", "update", f"NodeName={node}", "State=DOWN", f"Reason={reason}"])
        return len(pids) + 1

    def revive_node(self, node: str) -> None:
        """Bring a failed node back: its slurmd again, and the node returned to service."""
        self.start_slurmd(node)
        resumed = self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)
        # ReturnToService=2: a DOWN node whose slurmd registers is back in service by itself, and RESUME is then
        # refused ("Invalid node state specified"); only a node still down is an error
        if resumed.returncode != 0 and self.node_down(node):
            raise ClusterError(f"scontrol update NodeName={node} State=RESUME: {resumed.stderr.strip()}")

    def node_down(self, node: str) -> bool:
        """Whether NODE is out of service (DOWN, DRAIN or FAIL in its state)."""
        out = self.run(["scontrol", "-o", "show", "node", node], check=False).stdout
        state = dict(token.split("=", 1) for token in out.split() if "=" in token).get("State", "")
        return any(word in state for word in ("DOWN", "DRAIN", "FAIL"))

    def set_network(self, node: str, up: bool) -> None:
        """NODE's network cable out (``up=False``: its peers just stop hearing from it) or back in."""
        network.set_link(self.layout, node_index(node), up)

    # ---- logs

    def logs(self) -> str:
        """Tail of every daemon log, for failure messages."""
        assert self.layout
        parts = []
        for path in sorted((self.layout.base / "log").glob("*")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"== {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def _keep_logs(self) -> None:
        """Copy the daemon logs to $HPC_IMAGENET_KEEP_SLURM_LOGS/<cluster id>/ before teardown
        removes them (the state and spool folders hold nothing a post-mortem needs)."""
        keep = os.environ.get(KEEP_LOGS_ENV)
        if not keep or self.layout is None:
            return
        dest = Path(keep) / f"{time.strftime('%Y%m%d-%H%M%S')}-{self.layout.cid}"
        try:
            shutil.copytree(self.layout.base / "log", dest)
            shutil.copy2(self.conf, dest / "slurm.conf")
            log.warning("SLURM daemon logs kept in %s", dest)
        except OSError as exc:
            log.warning("could not keep the SLURM logs in %s: %s", dest, exc)

    # ---- start-up steps

    def _make_layout(self, reserved: Collection[str]) -> Layout:
        cid = secrets.token_hex(2)
        base = Path(tempfile.mkdtemp(prefix=f"hpc-slurm-{cid}-"))
        base.chmod(0o755)  # munged wants every directory above its socket world-searchable
        return Layout(cid=cid, nodes=self.nodes, subnet=network.free_subnet(reserved), base=base)

    def _record_state(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self._state_file = STATE_DIR / f"{self.layout.cid}.json"
        self._write_state()

    def _write_state(self) -> None:
        lay = self.layout
        # each PID with its start time: the reaper below kills a recorded PID only while it is still that process
        state = {"owner": os.getpid(), "owner_ticks": daemons.start_ticks(os.getpid()), "cid": lay.cid,
                 "nodes": lay.nodes, "subnet": lay.subnet, "base": str(lay.base),
                 "pids": {name: proc.pid for name, proc in self.procs.items()},
                 "ticks": {name: daemons.start_ticks(proc.pid) for name, proc in self.procs.items()}}
        self._state_file.write_text(json.dumps(state))

    def _shape(self) -> Shape:
        return Shape(name=self.name, cpus_per_node=self.cpus_per_node, gpus_per_node=self.gpus_per_node,
                     memory_mb=self.memory_mb, accounting=self.accounting, kill_wait=self.kill_wait)

    def _start_all(self) -> None:
        self.ports = daemons.distinct_free_ports(("slurmctld", "slurmdbd", "mysql"))
        for sub in ("etc", "log", "run", "state", "spool", "dev", "munge-key", "munge-sock", "db"):
            (self.layout.base / sub).mkdir(mode=0o755, exist_ok=True)
        network.make_network(self.layout)
        write_configs(self.layout, self._shape(), self.ports)
        daemons.start_munge(self.layout.base, self._spawn)
        if self.accounting:
            daemons.start_accounting(self.layout, self.ports, self._spawn)
            self.run(["sacctmgr", "-i", "add", "cluster", self.name])
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        wait_for("slurmctld to answer", lambda: "UP" in self.run(["scontrol", "ping"], check=False).stdout, 30)
        for node in self.layout.node_names:
            self.start_slurmd(node)
        self._check_alive()
        wait_for("all nodes idle", self._all_nodes_idle, 60)

    def _spawn(self, name: str, cmd: Sequence[str]) -> None:
        self.procs[name] = daemons.spawn(self.layout.base / "log", name, cmd, self.conf)
        self._write_state()

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise ClusterError(f"{name} exited with {proc.returncode} during start-up:\n{self.logs()}")

    def _node_states(self) -> Dict[str, str]:
        """Each node's state as sinfo prints it (idle, mixed, allocated, completing, down...)."""
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False).stdout.split("\n")
        return dict(line.split() for line in out if line.strip())

    def _all_nodes_idle(self) -> bool:
        self._check_alive()
        states = self._node_states()
        return len(states) == self.nodes and all(state == "idle" for state in states.values())

    def _drain_jobs(self) -> None:
        client.cancel_mine(self.env, full=True)
        try:
            wait_for("cancelled jobs to leave", lambda: not client.active(self.env), self.kill_wait + 20)
        except (ClusterError, client.SlurmError) as exc:
            log.warning("%s; killing what is left", exc)


@contextmanager
def _state_lock() -> Iterator[None]:
    """The state folder to this process alone while it chooses a new cluster's names."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _recorded_states() -> Iterator[Tuple[Path, dict]]:
    """Each cluster recorded in the state folder: its state file and what it says (unreadable ones skipped)."""
    for path in STATE_DIR.glob("*.json"):
        try:
            yield path, json.loads(path.read_text())
        except (OSError, ValueError):
            continue


def _live_subnets() -> Set[str]:
    """The subnets of the clusters recorded in the state folder (their networks may not exist yet)."""
    return {state["subnet"] for _, state in _recorded_states()}


def _owner_alive(state: dict) -> bool:
    """Whether the process that started a recorded cluster still runs (its PID and start time; a state file
    written before start times were recorded has the PID alone)."""
    ticks = state.get("owner_ticks")
    return daemons.same_process(state["owner"], ticks) if ticks is not None else daemons.pid_alive(state["owner"])


def reap_stale() -> None:
    """Remove clusters whose owning process died without tearing down (a killed test run)."""
    if not STATE_DIR.is_dir():
        return
    for path, state in _recorded_states():
        if _owner_alive(state):
            continue
        log.warning("removing stale local cluster %s left by pid %s", state["cid"], state["owner"])
        ticks = state.get("ticks", {})
        for name, pid in state.get("pids", {}).items():
            if daemons.same_process(pid, ticks.get(name)):  # a reused PID is some other process: left alone
                network.kill_pid(pid, signal.SIGKILL)
        network.teardown_layout(Layout(state["cid"], state["nodes"], state["subnet"], Path(state["base"])))
        path.unlink(missing_ok=True)
