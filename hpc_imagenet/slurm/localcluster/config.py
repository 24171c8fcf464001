"""The local cluster's configuration files, written under its base folder (nothing under /etc):
slurm.conf, gres.conf, slurmdbd.conf, and the hosts and resolv.conf files bind-mounted over each
node's /etc. Clients find the cluster through ``SLURM_CONF``.

``SlurmdParameters=config_overrides`` lets a 2-core machine declare 4 nodes x 32 CPUs x 4 GPUs, so
``sbatch --test-only`` judges batch files against a realistic GPU cluster; the GPUs are character
devices aliasing /dev/null (enough for gres.conf's File= and CUDA_VISIBLE_DEVICES).
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from hpc_imagenet.slurm.localcluster.commands import sh
from hpc_imagenet.slurm.localcluster.network import Layout


@dataclass(frozen=True)
class Shape:
    """What the cluster declares and how its daemons behave."""

    name: str
    cpus_per_node: int
    gpus_per_node: int
    memory_mb: int
    accounting: bool
    kill_wait: int  # seconds between SIGTERM and SIGKILL: the trainers' checkpoint window


def write_configs(lay: Layout, shape: Shape, ports: Mapping[str, int]) -> Path:
    """Every file the daemons and nodes read, and the fake GPU devices; returns slurm.conf's path."""
    etc = lay.base / "etc"
    (etc / "slurm.conf").write_text(slurm_conf(lay, shape, ports))
    gres = f"Name=gpu File={lay.base}/dev/nvidia[0-{shape.gpus_per_node - 1}]\n" if shape.gpus_per_node else ""
    (etc / "gres.conf").write_text(gres)
    (etc / "hosts").write_text(hosts(lay))
    for node in lay.node_names:  # TmpFS: each node's own (srun --mpi=pmix makes its step dirs there)
        (lay.base / "tmpfs" / node).mkdir(parents=True, exist_ok=True)
    # the host's DNS server is unreachable from the nodes: without this every reverse lookup
    # (gloo and c10d do them) waits 10 s; a local refusal fails at once
    (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    if shape.accounting:
        dbd = etc / "slurmdbd.conf"
        dbd.write_text(slurmdbd_conf(lay, ports))
        dbd.chmod(0o600)  # slurmdbd refuses a config others can read
    _make_gpus(lay, shape.gpus_per_node)
    return etc / "slurm.conf"


def _make_gpus(lay: Layout, gpus: int) -> None:
    for index in range(gpus):
        dev = lay.base / "dev" / f"nvidia{index}"
        if not dev.exists():
            sh(["mknod", str(dev), "c", "1", "3"])


def hosts(lay: Layout) -> str:
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback",
             f"{lay.controller_ip} {socket.gethostname()}"]
    lines += [f"{lay.node_ip(index)} {node}" for index, node in enumerate(lay.node_names, start=1)]
    return "\n".join(lines) + "\n"


def _accounting_lines(lay: Layout, shape: Shape, ports: Mapping[str, int]) -> list:
    if not shape.accounting:
        return ["AccountingStorageType=accounting_storage/none"]
    return ["AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={lay.controller_ip}",
            f"AccountingStoragePort={ports['slurmdbd']}",
            # an alternate munge socket for the dbd connection is given through the password
            f"AccountingStoragePass={lay.base}/munge-sock/munge.socket"]


def slurm_conf(lay: Layout, shape: Shape, ports: Mapping[str, int]) -> str:
    base = lay.base
    cores = shape.cpus_per_node // 2
    gres = f" Gres=gpu:{shape.gpus_per_node}" if shape.gpus_per_node else ""
    nodes = [f"NodeName={node} NodeAddr={lay.node_ip(index)} CPUs={shape.cpus_per_node} Boards=1 "
             f"SocketsPerBoard=2 CoresPerSocket={cores} ThreadsPerCore=1 RealMemory={shape.memory_mb}{gres} "
             "State=UNKNOWN" for index, node in enumerate(lay.node_names, start=1)]
    return "\n".join([
        f"ClusterName={shape.name}",
        f"SlurmctldHost={socket.gethostname()}({lay.controller_ip})",
        f"SlurmctldPort={ports['slurmctld']}", "SlurmdPort=6818",
        # cred_expire: the credential lifetime, which is also SLURM's hold on a requeued job before it
        # may start again (120 s by default; 60 s keeps a node-failure requeue test a minute shorter)
        "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={base}/munge-sock/munge.socket,cred_expire=60",
        "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={base}/state", f"SlurmdSpoolDir={base}/spool/slurmd.%n",
        f"SlurmctldPidFile={base}/run/slurmctld.pid", f"SlurmdPidFile={base}/run/slurmd.%n.pid",
        f"SlurmctldLogFile={base}/log/slurmctld.log", f"SlurmdLogFile={base}/log/slurmd.%n.log",
        # the nodes share this host's /tmp, where the pmix plugin would make the same step directory
        # on every node (EEXIST on the second: "task launch failed"); %n gives each node its own
        f"TmpFS={base}/tmpfs/%n",
        "SlurmctldDebug=info", "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides", "GresTypes=gpu", "MpiDefault=none",
        "SwitchType=switch/none", "JobAcctGatherType=jobacct_gather/none", "JobCompType=jobcomp/none",
        *_accounting_lines(lay, shape, ports),
        "ReturnToService=2", "InactiveLimit=0", f"KillWait={shape.kill_wait}", "Waittime=0",
        # small MinJobAge keeps `sbatch --wait` polling every 2 s (it backs off to 8 s otherwise);
        # finished jobs stay visible through sacct
        "MinJobAge=4" if shape.accounting else "MinJobAge=300",
        "MessageTimeout=20", "SlurmdTimeout=120", "SlurmctldTimeout=60", "JobRequeue=1",
        "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=2",
        *nodes,
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
    ]) + "\n"


def slurmdbd_conf(lay: Layout, ports: Mapping[str, int]) -> str:
    base = lay.base
    return "\n".join([
        "AuthType=auth/munge", f"AuthInfo=socket={base}/munge-sock/munge.socket",
        f"DbdHost={socket.gethostname()}", f"DbdAddr={lay.controller_ip}", f"DbdPort={ports['slurmdbd']}",
        "SlurmUser=root", f"PidFile={base}/run/slurmdbd.pid", f"LogFile={base}/log/slurmdbd.log", "DebugLevel=info",
        "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
        f"StoragePort={ports['mysql']}", "StorageUser=root", "StoragePass=unused",
        "StorageLoc=slurm_acct_db",
    ]) + "\n"
