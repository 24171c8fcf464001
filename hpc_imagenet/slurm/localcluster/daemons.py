"""The local cluster's daemons as processes of this one: munged with a fresh key, MariaDB and
slurmdbd for accounting (without them ``sacct`` is disabled and submitit cannot see job states),
and the helpers that start, probe and stop them. slurmctld and the slurmds are started by
:class:`hpc_imagenet.slurm.localcluster.cluster.SlurmCluster`, which knows the nodes."""
from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
from pathlib import Path
from typing import Callable, Dict, Mapping, Optional, Sequence

from hpc_imagenet.launch.ports import free_port
from hpc_imagenet.slurm.localcluster.commands import sbin_path, sh, wait_for
from hpc_imagenet.slurm.localcluster.network import Layout

log = logging.getLogger(__name__)

# name, command -> None: starts a daemon and keeps its process (SlurmCluster.spawn)
Spawn = Callable[[str, Sequence[str]], None]


def distinct_free_ports(names: Sequence[str]) -> Dict[str, int]:
    """A free port for each name, all different: the kernel may hand the same free port to two
    calls in a row (slurmctld and slurmdbd once got one port and slurmctld could not bind)."""
    ports: Dict[str, int] = {}
    while len(set(ports.values())) < len(names):
        ports = {name: free_port() for name in names}
    return ports


def spawn(log_dir: Path, name: str, cmd: Sequence[str], conf: Path) -> subprocess.Popen:
    """Start CMD in its own session, output to LOG_DIR/NAME.stdout; SLURM_CONF points at CONF
    (slurmdbd finds slurmdbd.conf next to it; the others get -f but it does no harm)."""
    env = {**os.environ, "PATH": sbin_path(), "SLURM_CONF": str(conf)}
    with open(log_dir / f"{name}.stdout", "ab") as out:
        return subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def terminate(proc: subprocess.Popen, name: str, timeout: float = 15) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("%s (pid %d) ignored SIGTERM for %.0fs; killing it", name, proc.pid, timeout)
        proc.kill()
        proc.wait(10)


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def start_ticks(pid: int) -> Optional[int]:
    """When process PID started, in clock ticks since boot (/proc/PID/stat's 22nd field), None where it is gone.
    A PID with its start time names one process: PIDs are reused within minutes on a busy machine (pid_max
    32768), so a recorded PID alone may name some later process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # after the command's ")": field 3 is index 0


def same_process(pid: int, ticks: Optional[int]) -> bool:
    """Whether PID is still the process that started at TICKS (never, where TICKS was not recorded)."""
    return ticks is not None and start_ticks(pid) == ticks


def start_munge(base: Path, start: Spawn) -> None:
    key = base / "munge-key" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    (base / "munge-key").chmod(0o700)  # munged refuses a key directory others can enter
    sock = base / "munge-sock" / "munge.socket"
    start("munged", ["munged", "-F", f"--key-file={key}", f"--socket={sock}", f"--pid-file={base}/run/munged.pid",
                     f"--log-file={base}/log/munged.log", f"--seed-file={base}/run/munged.seed"])
    wait_for("the munge socket", sock.exists, 15)


def start_accounting(lay: Layout, ports: Mapping[str, int], start: Spawn) -> None:
    """A private MariaDB on 127.0.0.1 and slurmdbd in front of it (the cluster is added by the caller)."""
    base, db, tmp = lay.base, lay.base / "db", lay.base / "db-tmp"
    # its own temporary folder, not /tmp: a bootstrap once failed when a temporary table file of its
    # own vanished from /tmp ("Error on delete of '/tmp/#sql-temptable-...'") while a second cluster
    # and the tests ran beside it
    tmp.mkdir(exist_ok=True)
    sh(["mariadb-install-db", "--no-defaults", f"--datadir={db}", f"--tmpdir={tmp}", "--user=root",
        "--auth-root-authentication-method=normal", "--skip-test-db"], timeout=180)
    # grant tables off: slurmdbd may connect as root without a password, and only over 127.0.0.1
    start("mariadbd", ["mariadbd", "--no-defaults", f"--datadir={db}", f"--tmpdir={tmp}", "--user=root",
                       "--skip-grant-tables",
                       "--bind-address=127.0.0.1", f"--port={ports['mysql']}", f"--socket={base}/run/mysqld.sock",
                       f"--pid-file={base}/run/mysqld.pid", f"--log-error={base}/log/mariadb.log",
                       "--innodb-buffer-pool-size=16M", "--skip-log-bin", "--skip-name-resolve"])
    wait_for("MariaDB to listen", lambda: port_open("127.0.0.1", ports["mysql"]), 60)
    start("slurmdbd", ["slurmdbd", "-D"])
    wait_for("slurmdbd to listen", lambda: port_open(lay.controller_ip, ports["slurmdbd"]), 60)
