"""A real SLURM cluster on one machine, for tests: munged, MariaDB + slurmdbd, slurmctld, and one
slurmd per node, each node in its own network namespace (own address, hostname and /etc/hosts)
with fake GPUs.

Usage::

    with SlurmCluster(nodes=4) as cluster:
        cluster.run(["sbatch", "--wait", "--wrap", "hostname"])

Why this shape (facts measured on Debian 12 / Slurm 22.05, see shared notes):

- Each slurmd is started with ``nsenter --net=/run/netns/NS unshare --mount --uts`` and a bind
  mount of our hosts file over /etc/hosts. ``ip netns exec`` remounts /sys and slurmd then dies
  ("No filesystem mounted on /sys/fs/cgroup").
- ``SlurmdParameters=config_overrides`` lets a 2-core machine declare 4 nodes x 32 CPUs x 4 GPUs,
  so ``sbatch --test-only`` judges batch files against a realistic GPU cluster.
- Accounting (MariaDB + slurmdbd) is on by default: without it ``sacct`` is disabled and submitit
  cannot see job states.
- Every resource is named after a per-cluster id and recorded in a state file, so teardown (and
  :func:`reap_stale` after a crash) removes exactly what this module made: the daemons it started,
  the processes left in its namespaces, the namespaces, veths and bridge. Nothing is written under
  /etc; clients find the cluster through ``SLURM_CONF`` (see :attr:`SlurmCluster.env`).
"""
from __future__ import annotations

import glob
import json
import logging
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, TypeVar

from launch.environment import free_port
from tests.system_packages import apt_install

log = logging.getLogger(__name__)

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "libpmix-dev")
# Debian's pmix plugin (slurm-wlm-basic-plugins, mpi_pmix_v4.so) dlopens this unversioned library at
# step launch; only libpmix-dev ships it, and no slurm package depends on it: without it every
# `srun --mpi=pmix` task fails to launch
PMIX_LIBRARY = "/usr/lib/*/pmix2/lib/libpmix.so"
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server-core", "mariadb-client-core")
BINARIES = {"slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client", "munged": "munge"}
ACCOUNTING_BINARIES = {"slurmdbd": "slurmdbd", "mariadbd": "mariadb-server-core",
                       "mariadb-install-db": "mariadb-server-core"}
STATE_DIR = Path("/run/hpc-imagenet-slurm")  # one JSON per live cluster, for reap_stale()
SLURM_SBIN = ("/usr/sbin", "/usr/bin")
REQUIRE_ENV = "HPC_IMAGENET_REQUIRE_SLURM"  # CI sets it: a cluster that cannot start is an error
KEEP_LOGS_ENV = "HPC_IMAGENET_KEEP_SLURM_LOGS"  # set: teardown copies the daemon logs there (a folder)

FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE"}

T = TypeVar("T")


class ClusterUnavailable(RuntimeError):
    """This machine cannot host the test cluster; the message says why."""


class ClusterError(RuntimeError):
    """The cluster was expected to work and did not; the message points at the logs."""


# ---------------------------------------------------------------------------------------------
# small helpers


def _distinct_free_ports(names) -> dict:
    """A free port for each name, all different: the kernel may hand the same free port to two
    calls in a row (slurmctld and slurmdbd once got one port and slurmctld could not bind)."""
    ports: dict = {}
    while len(set(ports.values())) < len(names):
        ports = {name: free_port() for name in names}
    return ports


def wait_for(what: str, check: Callable[[], Optional[T]], timeout: float, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy; raise ClusterError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def sh(cmd: Sequence[str], check: bool = True, env: Optional[Mapping[str, str]] = None,
       timeout: float = 60) -> subprocess.CompletedProcess:
    """Run a command, capture text output; on failure raise with its stderr in the message."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, env=None if env is None else dict(env),
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(cmd)} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()}")
    return proc



def _which(name: str) -> Optional[str]:
    return shutil.which(name, path=os.pathsep.join([*SLURM_SBIN, os.environ.get("PATH", "")]))


# ---------------------------------------------------------------------------------------------
# can this machine host it, and installing what is missing


def unavailable_reason() -> Optional[str]:
    """Why this machine cannot host the cluster, or None when it can (before installing)."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (network namespaces, bridge, daemons running as root)"
    for tool in ("ip", "nsenter", "unshare", "mknod"):
        if not _which(tool):
            return f"needs the {tool!r} command (iproute2 / util-linux)"
    probe = f"hisl-probe-{os.getpid()}"
    made = sh(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"cannot create network namespaces: {made.stderr.strip()}"
    sh(["ip", "netns", "delete", probe], check=False)
    if not _which("slurmctld") and not _which("apt-get"):
        return "SLURM is not installed and there is no apt-get to install it"
    return None


def missing_packages(accounting: bool = True) -> List[str]:
    wanted = {**BINARIES, **(ACCOUNTING_BINARIES if accounting else {})}
    missing = {pkg for binary, pkg in wanted.items() if not _which(binary)}
    return sorted(missing | (set() if glob.glob(PMIX_LIBRARY) else {"libpmix-dev"}))


def ensure_packages(accounting: bool = True) -> None:
    """apt-get install the Debian packages that are missing (idempotent, no daemon auto-start)."""
    if not missing_packages(accounting):
        return
    try:
        apt_install([*PACKAGES, *(ACCOUNTING_PACKAGES if accounting else ())])
    except RuntimeError as exc:
        raise ClusterError(str(exc)) from None
    if missing_packages(accounting):
        raise ClusterUnavailable(f"packages still missing after apt-get: {missing_packages(accounting)}")


# ---------------------------------------------------------------------------------------------
# the cluster


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

    def netns(self, i: int) -> str:
        return f"hisl-{self.cid}-node{i}"

    def veth(self, i: int) -> str:
        return f"hisl{self.cid}v{i}"

    @property
    def controller_ip(self) -> str:
        return f"{self.subnet}.1"

    def node_ip(self, i: int) -> str:
        return f"{self.subnet}.{10 + i}"

    @property
    def node_names(self) -> List[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]


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

    # ---- public API

    def start(self) -> "SlurmCluster":
        reason = unavailable_reason()
        if reason:
            raise ClusterUnavailable(reason)
        ensure_packages(self.accounting)
        reap_stale()
        self.layout = self._make_layout()
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
            _terminate(self.procs[name], name)
        self.procs.clear()
        self._keep_logs()
        _teardown_layout(self.layout)
        if self._state_file:
            self._state_file.unlink(missing_ok=True)
        self.layout = None

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

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
        return self.layout.node_ip(int(name.removeprefix("node")))

    def node_command(self, name: str, cmd: Sequence[str]) -> List[str]:
        """CMD wrapped to run on node NAME outside SLURM (its namespace, hostname, /etc/hosts): a
        stand-in for any other kind of host, such as a Kubernetes pod."""
        assert self.layout
        return _in_node(self.layout, int(name.removeprefix("node")), [shlex.quote(str(c)) for c in cmd])

    def job_state(self, job_id: str) -> Dict[str, str]:
        """``scontrol show job`` as a dict (JobState, ExitCode, Restarts, NodeList, ...)."""
        out = self.run(["scontrol", "-o", "show", "job", job_id], check=False).stdout
        return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)

    def sacct(self, job_id: str) -> List[Dict[str, str]]:
        """Accounting rows for a job and its steps, every run of a requeued job (-D) oldest first."""
        fields = "JobIDRaw,JobID,JobName,State,ExitCode,NodeList,Start,End"
        out = self.run(["sacct", "-n", "-P", "-D", "-j", job_id, "--format", fields]).stdout
        keys = fields.split(",")
        return [dict(zip(keys, line.split("|"))) for line in out.splitlines() if line.strip()]

    def wait_finished(self, job_id: str, timeout: float = 60, runs: int = 1) -> Dict[str, str]:
        """The job's last accounting row once it left the queue and reached a final state (accounting
        lags the job a little). ``runs``: how many runs to expect (a requeued job has one row each)."""
        def final() -> Optional[Dict[str, str]]:
            if self.run(["squeue", "-h", "-j", job_id], check=False).stdout.strip():
                return None
            rows = [r for r in self.sacct(job_id) if r["JobID"] == job_id]
            done = len(rows) >= runs and rows[-1]["State"].split()[0] in FINAL_STATES
            return rows[-1] if done else None
        return wait_for(f"job {job_id} in accounting", final, timeout, interval=0.5)

    def start_slurmd(self, node: str) -> None:
        """Start NODE's slurmd (again, after a test killed it: it finds its running job steps)."""
        (self.layout.base / "spool" / f"slurmd.{node}").mkdir(exist_ok=True)
        i = int(node.removeprefix("node"))
        self._spawn(node, _in_node(self.layout, i, ["slurmd", "-D", "-f", str(self.conf), "-N", node]))

    def kill_slurmd(self, node: str) -> None:
        """SIGKILL NODE's slurmd only (nsenter, unshare and sh exec it: the pid we started is slurmd)."""
        self.procs[node].kill()
        self.procs[node].wait(10)

    def fail_node(self, node: str, reason: str = "node failure (test)") -> int:
        """A node dies: SIGKILL its slurmd and every process in its namespace (job steps, trainers),
        then mark it DOWN, as slurmctld does when a dead node stops answering (after SlurmdTimeout,
        too long for a test). Returns how many processes were killed."""
        self.kill_slurmd(node)
        inode = {(Path("/run/netns") / self.layout.netns(int(node.removeprefix("node")))).stat().st_ino: node}
        pids = _pids_in_namespaces(inode)
        for pid in pids:
            _kill(pid, signal.SIGKILL)
        self.run(["scontrol", "update", f"NodeName={node}", "State=DOWN", f"Reason={reason}"])
        return len(pids) + 1

    def revive_node(self, node: str) -> None:
        """Bring a failed node back: its slurmd again, and the node returned to service."""
        self.start_slurmd(node)
        self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    def wait_idle(self, timeout: float = 60) -> None:
        """Until no job is queued or running and every node is idle."""
        wait_for("an empty queue", lambda: not self.run(["squeue", "-h"], check=False).stdout.strip(), timeout)
        wait_for("idle nodes", self._all_nodes_idle, timeout)

    def wait_node_idle(self, node: str, timeout: float = 300) -> None:
        """Until NODE alone is idle (after a fault, a job may stay COMPLETING until slurmctld hears from the
        node's restarted slurmd, which a loaded machine can delay up to SlurmdTimeout, 120 s, and beyond);
        the other nodes may be busy with other jobs."""
        wait_for(f"{node} to be idle again", lambda: self._node_states().get(node) == "idle", timeout)

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

    def logs(self) -> str:
        """Tail of every daemon log, for failure messages."""
        assert self.layout
        parts = []
        for path in sorted((self.layout.base / "log").glob("*")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"== {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    # ---- start-up steps

    def _make_layout(self) -> Layout:
        cid = secrets.token_hex(2)
        base = Path(tempfile.mkdtemp(prefix=f"hpc-slurm-{cid}-"))
        base.chmod(0o755)  # munged wants every directory above its socket world-searchable
        return Layout(cid=cid, nodes=self.nodes, subnet=_free_subnet(), base=base)

    def _record_state(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self._state_file = STATE_DIR / f"{self.layout.cid}.json"
        self._write_state()

    def _write_state(self) -> None:
        lay = self.layout
        state = {"owner": os.getpid(), "cid": lay.cid, "nodes": lay.nodes, "subnet": lay.subnet,
                 "base": str(lay.base), "pids": {k: p.pid for k, p in self.procs.items()}}
        self._state_file.write_text(json.dumps(state))

    def _start_all(self) -> None:
        self.ports = _distinct_free_ports(("slurmctld", "slurmdbd", "mysql"))
        for sub in ("etc", "log", "run", "state", "spool", "dev", "munge-key", "munge-sock", "db"):
            (self.layout.base / sub).mkdir(mode=0o755, exist_ok=True)
        _make_network(self.layout)
        self._make_gpus()
        self._write_configs()
        self._start_munge()
        if self.accounting:
            self._start_accounting()
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        wait_for("slurmctld to answer", lambda: "UP" in self.run(["scontrol", "ping"], check=False).stdout, 30)
        for node in self.layout.node_names:
            self.start_slurmd(node)
        self._check_alive()
        wait_for("all nodes idle", self._all_nodes_idle, 60)

    def _make_gpus(self) -> None:
        # character devices aliasing /dev/null: enough for gres.conf File= and CUDA_VISIBLE_DEVICES
        for g in range(self.gpus_per_node):
            dev = self.layout.base / "dev" / f"nvidia{g}"
            if not dev.exists():
                sh(["mknod", str(dev), "c", "1", "3"])

    def _write_configs(self) -> None:
        etc = self.layout.base / "etc"
        (etc / "slurm.conf").write_text(self._slurm_conf())
        gres = ""
        if self.gpus_per_node:
            gres = f"Name=gpu File={self.layout.base}/dev/nvidia[0-{self.gpus_per_node - 1}]\n"
        (etc / "gres.conf").write_text(gres)
        (etc / "hosts").write_text(self._hosts())
        for n in self.layout.node_names:  # TmpFS: each node's own (srun --mpi=pmix makes its step dirs there)
            (self.layout.base / "tmpfs" / n).mkdir(parents=True, exist_ok=True)
        # the host's DNS server is unreachable from the nodes: without this every reverse lookup
        # (gloo and c10d do them) waits 10 s; a local refusal fails at once
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        if self.accounting:
            dbd = etc / "slurmdbd.conf"
            dbd.write_text(self._slurmdbd_conf())
            dbd.chmod(0o600)  # slurmdbd refuses a config others can read

    def _hosts(self) -> str:
        lay = self.layout
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback",
                 f"{lay.controller_ip} {socket.gethostname()}"]
        lines += [f"{lay.node_ip(i)} {n}" for i, n in enumerate(lay.node_names, start=1)]
        return "\n".join(lines) + "\n"

    def _slurm_conf(self) -> str:
        lay, b = self.layout, self.layout.base
        cores = self.cpus_per_node // 2
        gres = f" Gres=gpu:{self.gpus_per_node}" if self.gpus_per_node else ""
        nodes = [f"NodeName={n} NodeAddr={lay.node_ip(i)} CPUs={self.cpus_per_node} Boards=1 SocketsPerBoard=2 "
                 f"CoresPerSocket={cores} ThreadsPerCore=1 RealMemory={self.memory_mb}{gres} State=UNKNOWN"
                 for i, n in enumerate(lay.node_names, start=1)]
        acct = ["AccountingStorageType=accounting_storage/none"]
        if self.accounting:
            acct = ["AccountingStorageType=accounting_storage/slurmdbd",
                    f"AccountingStorageHost={lay.controller_ip}",
                    f"AccountingStoragePort={self.ports['slurmdbd']}",
                    # an alternate munge socket for the dbd connection is given through the password
                    f"AccountingStoragePass={b}/munge-sock/munge.socket"]
        return "\n".join([
            f"ClusterName={self.name}",
            f"SlurmctldHost={socket.gethostname()}({lay.controller_ip})",
            f"SlurmctldPort={self.ports['slurmctld']}", "SlurmdPort=6818",
            # cred_expire: the credential lifetime, which is also SLURM's hold on a requeued job before it
            # may start again (120 s by default; 60 s keeps a node-failure requeue test a minute shorter)
            "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={b}/munge-sock/munge.socket,cred_expire=60",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={b}/state", f"SlurmdSpoolDir={b}/spool/slurmd.%n",
            f"SlurmctldPidFile={b}/run/slurmctld.pid", f"SlurmdPidFile={b}/run/slurmd.%n.pid",
            f"SlurmctldLogFile={b}/log/slurmctld.log", f"SlurmdLogFile={b}/log/slurmd.%n.log",
            # the nodes share this host's /tmp, where the pmix plugin would make the same step directory
            # on every node (EEXIST on the second: "task launch failed"); %n gives each node its own
            f"TmpFS={b}/tmpfs/%n",
            "SlurmctldDebug=info", "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides", "GresTypes=gpu", "MpiDefault=none",
            "SwitchType=switch/none", "JobAcctGatherType=jobacct_gather/none", "JobCompType=jobcomp/none",
            *acct,
            "ReturnToService=2", "InactiveLimit=0", f"KillWait={self.kill_wait}", "Waittime=0",
            # small MinJobAge keeps `sbatch --wait` polling every 2 s (it backs off to 8 s otherwise);
            # finished jobs stay visible through sacct
            "MinJobAge=4" if self.accounting else "MinJobAge=300",
            "MessageTimeout=20", "SlurmdTimeout=120", "SlurmctldTimeout=60", "JobRequeue=1",
            "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=2",
            *nodes,
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
        ]) + "\n"

    def _slurmdbd_conf(self) -> str:
        lay, b = self.layout, self.layout.base
        return "\n".join([
            "AuthType=auth/munge", f"AuthInfo=socket={b}/munge-sock/munge.socket",
            f"DbdHost={socket.gethostname()}", f"DbdAddr={lay.controller_ip}", f"DbdPort={self.ports['slurmdbd']}",
            "SlurmUser=root", f"PidFile={b}/run/slurmdbd.pid", f"LogFile={b}/log/slurmdbd.log", "DebugLevel=info",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
            f"StoragePort={self.ports['mysql']}", "StorageUser=root", "StoragePass=unused",
            "StorageLoc=slurm_acct_db",
        ]) + "\n"

    def _start_munge(self) -> None:
        b = self.layout.base
        key = b / "munge-key" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        (b / "munge-key").chmod(0o700)  # munged refuses a key directory others can enter
        sock = b / "munge-sock" / "munge.socket"
        self._spawn("munged", ["munged", "-F", f"--key-file={key}", f"--socket={sock}",
                               f"--pid-file={b}/run/munged.pid", f"--log-file={b}/log/munged.log",
                               f"--seed-file={b}/run/munged.seed"])
        wait_for("the munge socket", sock.exists, 15)

    def _start_accounting(self) -> None:
        b, db = self.layout.base, self.layout.base / "db"
        sh(["mariadb-install-db", "--no-defaults", f"--datadir={db}", "--user=root",
            "--auth-root-authentication-method=normal", "--skip-test-db"], timeout=180)
        # grant tables off: slurmdbd may connect as root without a password, and only over 127.0.0.1
        self._spawn("mariadbd", ["mariadbd", "--no-defaults", f"--datadir={db}", "--user=root",
                                 "--skip-grant-tables", "--bind-address=127.0.0.1", f"--port={self.ports['mysql']}",
                                 f"--socket={b}/run/mysqld.sock", f"--pid-file={b}/run/mysqld.pid",
                                 f"--log-error={b}/log/mariadb.log", "--innodb-buffer-pool-size=16M",
                                 "--skip-log-bin", "--skip-name-resolve"])
        wait_for("MariaDB to listen", lambda: _port_open("127.0.0.1", self.ports["mysql"]), 60)
        self._spawn("slurmdbd", ["slurmdbd", "-D"])
        wait_for("slurmdbd to listen", lambda: _port_open(self.layout.controller_ip, self.ports["slurmdbd"]), 60)
        self.run(["sacctmgr", "-i", "add", "cluster", self.name])

    def _spawn(self, name: str, cmd: Sequence[str], env: Optional[Mapping[str, str]] = None) -> None:
        logf = open(self.layout.base / "log" / f"{name}.stdout", "ab")
        # slurmdbd finds slurmdbd.conf next to SLURM_CONF; the others get -f but it does no harm
        child_env = {**os.environ, "PATH": os.pathsep.join([*SLURM_SBIN, os.environ.get("PATH", "")]),
                     "SLURM_CONF": str(self.conf), **(env or {})}
        self.procs[name] = subprocess.Popen(list(cmd), stdout=logf, stderr=subprocess.STDOUT, env=child_env,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        logf.close()
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
        return len(states) == self.nodes and all(s == "idle" for s in states.values())

    def _drain_jobs(self) -> None:
        self.run(["scancel", "--full", "--user=root"], check=False)
        try:
            wait_for("cancelled jobs to leave", lambda: not self.run(["squeue", "-h"], check=False).stdout.strip(),
                     self.kill_wait + 20)
        except ClusterError as exc:
            log.warning("%s; killing what is left", exc)


# ---------------------------------------------------------------------------------------------
# network: bridge + one namespace and veth per node


def _free_subnet() -> str:
    used = sh(["ip", "-o", "-4", "addr"]).stdout + sh(["ip", "-4", "route"]).stdout
    for third in [secrets.randbelow(200) + 20 for _ in range(50)]:
        subnet = f"10.213.{third}"
        if f"{subnet}." not in used:
            return subnet
    raise ClusterUnavailable("no free 10.213.x.0/24 subnet")


def _make_network(lay: Layout) -> None:
    sh(["ip", "link", "add", lay.bridge, "type", "bridge"])
    sh(["ip", "addr", "add", f"{lay.controller_ip}/24", "dev", lay.bridge])
    sh(["ip", "link", "set", lay.bridge, "up"])
    for i in range(1, lay.nodes + 1):
        ns, veth = lay.netns(i), lay.veth(i)
        sh(["ip", "netns", "add", ns])
        sh(["ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p"])
        sh(["ip", "link", "set", veth, "master", lay.bridge, "up"])
        sh(["ip", "link", "set", f"{veth}p", "netns", ns])
        sh(["ip", "-n", ns, "link", "set", f"{veth}p", "name", "eth0"])
        sh(["ip", "-n", ns, "addr", "add", f"{lay.node_ip(i)}/24", "dev", "eth0"])
        sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
        sh(["ip", "-n", ns, "link", "set", "lo", "up"])  # gloo and c10d also talk over loopback
        sh(["ip", "-n", ns, "route", "add", "default", "via", lay.controller_ip])


def _in_node(lay: Layout, i: int, cmd: Sequence[str]) -> List[str]:
    """Wrap ``cmd`` to run as node i: its network namespace, hostname and /etc/hosts."""
    inner = (f"mount --bind {lay.base}/etc/hosts /etc/hosts && "
             f"mount --bind {lay.base}/etc/resolv.conf /etc/resolv.conf && hostname node{i} && exec "
             + " ".join(cmd))
    return ["nsenter", f"--net=/run/netns/{lay.netns(i)}", "unshare", "--mount", "--uts", "sh", "-c", inner]


def _netns_inodes(lay: Layout) -> Dict[int, str]:
    inodes = {}
    for i in range(1, lay.nodes + 1):
        path = Path("/run/netns") / lay.netns(i)
        if path.exists():
            inodes[path.stat().st_ino] = lay.netns(i)
    return inodes


def _pids_in_namespaces(inodes: Mapping[int, str]) -> List[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "ns" / "net").stat().st_ino in inodes:
                    pids.append(int(entry.name))
            except OSError:
                continue  # exited meanwhile, or a kernel thread
    return pids


def _teardown_layout(lay: Layout) -> None:
    """Kill every process still inside our namespaces, then delete namespaces, bridge and files."""
    inodes = _netns_inodes(lay)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _pids_in_namespaces(inodes) if inodes else []
        for pid in pids:
            _kill(pid, sig)
        try:
            wait_for("processes in the node namespaces to exit", lambda: not _pids_in_namespaces(inodes), 10)
            break
        except ClusterError:
            continue
    for i in range(1, lay.nodes + 1):
        sh(["ip", "netns", "delete", lay.netns(i)], check=False)
        sh(["ip", "link", "delete", lay.veth(i)], check=False)
    sh(["ip", "link", "delete", lay.bridge], check=False)
    shutil.rmtree(lay.base, ignore_errors=True)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _terminate(proc: subprocess.Popen, name: str, timeout: float = 15) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("%s (pid %d) ignored SIGTERM for %.0fs; killing it", name, proc.pid, timeout)
        proc.kill()
        proc.wait(10)


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def reap_stale() -> None:
    """Remove clusters whose owning process died without tearing down (a killed test run)."""
    if not STATE_DIR.is_dir():
        return
    for path in STATE_DIR.glob("*.json"):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _pid_alive(state["owner"]):
            continue
        log.warning("removing stale test cluster %s left by pid %s", state["cid"], state["owner"])
        for pid in state.get("pids", {}).values():
            if _pid_alive(pid):
                _kill(pid, signal.SIGKILL)
        _teardown_layout(Layout(state["cid"], state["nodes"], state["subnet"], Path(state["base"])))
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# by hand (the tests get theirs from tests/cluster/conftest.py: one cluster per session)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m tests.slurm_cluster [--nodes N] [--gpus-per-node G] [-- CMD ...]``: bring the test
    cluster up, run CMD with SLURM_CONF set (as a user's login node would have it), tear it down.
    Without CMD: a manual check (sinfo, a 2-node job, sacct). Test tooling (``make bench-cluster``)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tests.slurm_cluster", description=main.__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command to run against the cluster")
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    logging.basicConfig(level=logging.INFO)
    t0 = time.monotonic()
    with SlurmCluster(nodes=a.nodes, gpus_per_node=a.gpus_per_node) as c:
        print(f"up in {time.monotonic() - t0:.1f}s; SLURM_CONF={c.conf}", flush=True)
        if cmd:
            rc = subprocess.run(cmd, env=c.env).returncode
        else:
            print(c.run(["sinfo"]).stdout)
            print(c.run(["sbatch", "--wait", "-N2", "--wrap", "srun hostname"], cwd=c.layout.base).stdout)
            print(c.run(["sacct", "-a"]).stdout)
            rc = 0
    print(f"total {time.monotonic() - t0:.1f}s")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
