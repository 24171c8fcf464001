"""Where this process sits in the job: cluster environments, each a small class with ``detect()``.

The engine calls :func:`detect`, then ``env.validate(torch.cuda.device_count())``, then reads
``rank``, ``local_rank``, ``world_size``, ``local_world_size``, ``node_rank``, ``master_addr``,
``master_port`` and ``device_index``; it never cares which launcher started it.

Detection order (the first class whose variables are present wins):

1. ``launch.mpi`` (``mpirun ... python -m launch.mpi``): it exports torch's variables plus a marker.
2. torchrun / ``torch.distributed.launch`` (RANK, WORLD_SIZE, ...): checked before SLURM and MPI
   because it also runs inside SLURM and MPI allocations, where their variables are inherited.
3. A SLURM task started by ``srun`` (not the batch shell itself).
4. Open MPI (``OMPI_COMM_WORLD_*``), 5. MPICH / Intel MPI / hydra (``PMI_*``), 6. PMIx.
7. Kubeflow's PyTorchJob: one process per pod, given MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK and
   no LOCAL_RANK (a pod that runs torchrun gets LOCAL_RANK from it and is case 2).
8. A single process.

Each class keeps the variable names it reads in one table (``VARS``: role -> candidate names,
first present wins), so supporting a new launcher version means editing one table.
"""
from __future__ import annotations

import logging
import os
import socket
import re
import zlib
from typing import ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple, Type

log = logging.getLogger(__name__)

DEFAULT_PORT = 29500  # torch's own default, used when nothing better is known
# Ports derived from a job id land in [PORT_BASE, PORT_BASE + PORT_SPAN): below Linux's ephemeral
# range (32768+), so a derived port is not already taken by some outgoing connection.
PORT_BASE = 12000
PORT_SPAN = 20000
LOOPBACK = "127.0.0.1"
MPI_MARKER = "LAUNCH_MPI"  # set by launch.mpi to the MPI library's short name



def free_port(host: str = "") -> int:
    """A TCP port nothing listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]

class LaunchError(RuntimeError):
    """The launch environment is inconsistent; the message says what to change."""


# ----------------------------------------------------------------------------- helpers

def derive_port(job_id: str) -> int:
    """A port that is the same on every rank of one job and differs between jobs.

    Numeric ids (SLURM) map to consecutive ports, so two jobs sharing a node collide only when
    their ids differ by a multiple of PORT_SPAN; other ids (an MPI namespace) are hashed.
    """
    key = str(job_id).strip()
    if not key:
        raise LaunchError("cannot derive a port from an empty job id: set MASTER_PORT")
    number = int(key) if key.isdigit() else zlib.crc32(key.encode())
    return PORT_BASE + number % PORT_SPAN


_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def _split_top_level(spec: str) -> List[str]:
    """Split at commas that are not inside brackets: 'a[1-2,4],b3' -> ['a[1-2,4]', 'b3']."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(spec):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise LaunchError(f"cannot parse hostlist {spec!r}: unbalanced brackets")
        if ch == "," and depth == 0:
            parts.append(spec[start:i])
            start = i + 1
    if depth:
        raise LaunchError(f"cannot parse hostlist {spec!r}: unbalanced brackets")
    parts.append(spec[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_range(body: str, spec: str) -> List[str]:
    """'01-03,7' -> ['01', '02', '03', '7']; the width of the low end sets the zero padding."""
    out = []
    for item in body.split(","):
        lo, sep, hi = item.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise LaunchError(f"cannot parse hostlist {spec!r}: bad range {item!r}")
        if sep and int(hi) < int(lo):
            raise LaunchError(f"cannot parse hostlist {spec!r}: range {item!r} runs backwards")
        out += [str(n).zfill(len(lo)) for n in range(int(lo), int(hi if sep else lo) + 1)]
    return out


def expand_hostlist(spec: str) -> List[str]:
    """Expand a SLURM hostlist, like ``scontrol show hostnames``.

    ``node[01-04,07]`` -> node01 node02 node03 node04 node07; ``gpu-a[1-2],gpu-b3`` -> gpu-a1
    gpu-a2 gpu-b3; several bracket groups in one name give every combination (``r[1-2]n[1-2]``).
    """
    hosts: List[str] = []
    for item in _split_top_level(spec):
        names = [""]
        pos = 0
        for match in _BRACKET.finditer(item):
            literal = item[pos:match.start()]
            names = [n + literal + r for n in names for r in _expand_range(match.group(1), spec)]
            pos = match.end()
        tail = item[pos:]
        if "[" in tail or "]" in tail:
            raise LaunchError(f"cannot parse hostlist {spec!r}: unbalanced brackets")
        hosts += [n + tail for n in names]
    if not hosts:
        raise LaunchError(f"empty hostlist {spec!r}")
    return hosts


def expand_tasks_per_node(spec: str) -> List[int]:
    """SLURM's compressed task counts: ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts: List[int] = []
    for item in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not match:
            raise LaunchError(f"cannot parse SLURM tasks-per-node {spec!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


# ----------------------------------------------------------------------------- base class

class ClusterEnvironment:
    """Rank layout of one process. Subclasses read it from their launcher's variables.

    ``VARS`` maps a role to the variable names that may carry it (first present wins);
    ``REQUIRED`` lists the roles whose presence identifies the launcher.
    """

    name: ClassVar[str] = "base"
    VARS: ClassVar[Dict[str, Tuple[str, ...]]] = {}
    REQUIRED: ClassVar[Tuple[str, ...]] = ()
    # How to ask this launcher for N processes per node ({n} is filled in by the hints).
    PROCS_PER_NODE: ClassVar[str] = "{n} processes per node"

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        self.env = dict(os.environ if environ is None else environ)
        self._bound_device: Optional[int] = None  # set when the launcher gives each task its own GPU

    @property
    def device_index(self) -> int:
        """The CUDA device this process uses: its local rank, unless SLURM bound one GPU per task."""
        return self.local_rank if self._bound_device is None else self._bound_device

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return all(cls._lookup(environ, role) is not None for role in cls.REQUIRED)

    # -- reading the table
    @classmethod
    def _lookup(cls, environ: Mapping[str, str], role: str) -> Optional[str]:
        for key in cls.VARS.get(role, ()):
            value = environ.get(key)
            if value is not None and value.strip() != "":
                return value.strip()
        return None

    def _str(self, role: str, default: Optional[str] = None) -> Optional[str]:
        value = self._lookup(self.env, role)
        return default if value is None else value

    def _int(self, role: str, default: Optional[int] = None) -> int:
        value = self._lookup(self.env, role)
        if value is None:
            if default is None:
                names = " or ".join(self.VARS.get(role, (role,)))
                raise LaunchError(f"{self.name}: {names} is not set; was this process started by the launcher?")
            return default
        try:
            return int(value)
        except ValueError:
            key = next(k for k in self.VARS[role] if self.env.get(k, "").strip() == value)
            raise LaunchError(f"{self.name}: {key}={value!r} is not an integer") from None

    def _master_port(self) -> int:
        """MASTER_PORT if set, else one derived from the job id, else torch's default."""
        if self.env.get("MASTER_PORT", "").strip():
            try:
                return int(self.env["MASTER_PORT"])
            except ValueError:
                raise LaunchError(f"MASTER_PORT={self.env['MASTER_PORT']!r} is not a port number") from None
        job_id = self._str("job_id")
        return derive_port(job_id) if job_id else DEFAULT_PORT

    # -- checks
    def validate(self, gpus_per_node: int = 0) -> None:
        """Raise LaunchError with a one-line hint when the layout cannot work."""
        self._check_ranks()
        self._check_layout()
        self._check_master()
        if gpus_per_node:
            self._check_gpus(gpus_per_node)

    def _check_ranks(self) -> None:
        if self.world_size < 1:
            raise LaunchError(f"{self.name}: world size {self.world_size} must be at least 1")
        if not 0 <= self.rank < self.world_size:
            raise LaunchError(f"{self.name}: rank {self.rank} is outside world size {self.world_size}; "
                              "the launcher's variables disagree (are two launchers nested?)")
        if not 1 <= self.local_world_size <= self.world_size:
            raise LaunchError(f"{self.name}: {self.local_world_size} processes on this node but "
                              f"{self.world_size} in the whole job; the launcher's variables disagree")
        if not 0 <= self.local_rank < self.local_world_size:
            raise LaunchError(f"{self.name}: local rank {self.local_rank} is outside the "
                              f"{self.local_world_size} processes on this node")

    def _check_layout(self) -> None:
        """Launcher-specific consistency of nodes x processes (subclasses override)."""

    def _check_master(self) -> None:
        if not self.master_addr:
            raise LaunchError(f"{self.name}: ranks span several nodes and MASTER_ADDR is unset: start "
                              "through `python -m launch.mpi SCRIPT ...` (it finds rank 0's address) or "
                              "export MASTER_ADDR=<rank 0's host> to every rank")
        if not 0 < self.master_port < 65536:
            raise LaunchError(f"{self.name}: master port {self.master_port} is not in 1-65535; set MASTER_PORT")

    def _procs_hint(self, procs: int) -> str:
        return self.PROCS_PER_NODE.format(n=procs)

    def _check_gpus(self, gpus: int) -> None:
        visible = self.env.get("CUDA_VISIBLE_DEVICES")
        seen = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
        if self.device_index >= gpus:
            raise LaunchError(f"{self.name}: local rank {self.local_rank} would use GPU {self.device_index} but "
                              f"only {gpus} are visible{seen}: start {self._procs_hint(gpus)}")
        if self.local_world_size > gpus:
            raise LaunchError(f"{self.name}: {self.local_world_size} processes on this node but only {gpus} "
                              f"GPU(s) visible{seen}: start one process per GPU, {self._procs_hint(gpus)}")
        if self.local_world_size < gpus:
            log.warning("%s: %d process(es) on this node leave %d of %d GPUs idle; use %s",
                        self.name, self.local_world_size, gpus - self.local_world_size, gpus,
                        self._procs_hint(gpus))

    def describe(self) -> str:
        return (f"{self.name}: rank {self.rank}/{self.world_size} local {self.local_rank}/"
                f"{self.local_world_size} node {self.node_rank} master {self.master_addr}:{self.master_port}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


# ----------------------------------------------------------------------------- torchrun

class TorchElasticEnvironment(ClusterEnvironment):
    """torchrun and ``python -m torch.distributed.launch``: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_*."""

    name = "torchrun"
    VARS = {
        "rank": ("RANK",),
        "local_rank": ("LOCAL_RANK",),
        "world_size": ("WORLD_SIZE",),
        "local_world_size": ("LOCAL_WORLD_SIZE",),
        "node_rank": ("GROUP_RANK",),
        "num_nodes": ("GROUP_WORLD_SIZE",),
        "master_addr": ("MASTER_ADDR",),
        "master_port": ("MASTER_PORT",),
    }
    REQUIRED = ("rank", "world_size", "local_rank", "master_addr", "master_port")
    PROCS_PER_NODE = "--nproc-per-node={n}"

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.rank = self._int("rank")
        self.local_rank = self._int("local_rank")
        self.world_size = self._int("world_size")
        # unknown when set by hand: assume no more processes than this rank proves exist
        self.local_world_size = self._int("local_world_size", self.local_rank + 1)
        self.node_rank = self._int("node_rank", self.rank // max(self.local_world_size, 1))
        self.master_addr = self._str("master_addr") or ""
        self.master_port = self._master_port()

    def _check_layout(self) -> None:
        nodes = self._int("num_nodes", 0)
        if nodes and nodes * self.local_world_size != self.world_size:
            raise LaunchError(f"{self.name}: world size {self.world_size} is not {nodes} nodes x "
                              f"{self.local_world_size} processes: give every node the same --nproc-per-node")


class MpiLaunchEnvironment(TorchElasticEnvironment):
    """``python -m launch.mpi`` under mpirun/mpiexec/srun: torch's variables, set by launch.mpi.

    Same variables as torchrun, told apart by the marker so run records name the real launcher.
    """

    VARS = {**TorchElasticEnvironment.VARS, "marker": (MPI_MARKER,)}
    REQUIRED = TorchElasticEnvironment.REQUIRED + ("marker",)
    PROCS_PER_NODE = "{n} ranks per node (Open MPI: --map-by ppr:{n}:node; MPICH/Intel MPI: -ppn {n})"

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.name = f"mpi/{self._str('marker')}"


# ----------------------------------------------------------------------------- SLURM

class SlurmEnvironment(ClusterEnvironment):
    """One task of an ``srun`` step (one task per GPU). The batch shell itself is not a task:
    ``python train.py`` typed straight into an sbatch script falls through to single process."""

    name = "slurm"
    VARS = {
        "rank": ("SLURM_PROCID",),
        "local_rank": ("SLURM_LOCALID",),
        # the step's own counts first: `srun -n 2` inside a bigger allocation runs 2 tasks
        "world_size": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"),
        "node_rank": ("SLURM_NODEID",),
        "num_nodes": ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
        "tasks_per_node": ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
        "ntasks_per_node": ("SLURM_NTASKS_PER_NODE",),
        "nodelist": ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"),
        "job_id": ("SLURM_JOB_ID", "SLURM_JOBID"),
        "gpus_per_task": ("SLURM_GPUS_PER_TASK",),
        # present when SLURM allocated GPUs to the job (--gpus-per-node, --gres=gpu:N)
        "gpus_allocated": ("SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"),
        # only srun sets this one; the batch shell has SLURM_PROCID=0 but no step
        "srun_step": ("SLURM_STEP_NUM_TASKS",),
    }
    REQUIRED = ("rank", "local_rank", "world_size", "srun_step")
    PROCS_PER_NODE = "#SBATCH --ntasks-per-node={n} (one task per GPU)"
    # MPI launchers started inside an allocation leave SLURM's variables of THEIR daemons behind
    _MPI_SIZES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    _MPI_RANKS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        if not super().detect(environ):
            return False
        # mpirun inside an allocation starts its daemons with srun; the ranks inherit the
        # daemons' SLURM_PROCID, which is not their rank. Trust SLURM only if MPI agrees.
        size, rank = cls._lookup(environ, "world_size"), cls._lookup(environ, "rank")
        return (all(environ.get(k, size).strip() == size for k in cls._MPI_SIZES)
                and all(environ.get(k, rank).strip() == rank for k in cls._MPI_RANKS))

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.rank = self._int("rank")
        self.local_rank = self._int("local_rank")
        self.world_size = self._int("world_size")
        self.node_rank = self._int("node_rank", 0)
        self.num_nodes = self._int("num_nodes", 1)
        self.local_world_size = self._local_world_size()
        self.master_addr = self.env.get("MASTER_ADDR", "").strip() or self._first_host()
        self.master_port = self._master_port()

    def _local_world_size(self) -> int:
        spec = self._str("tasks_per_node")
        if spec:
            counts = expand_tasks_per_node(spec)
            if self.node_rank < len(counts):
                return counts[self.node_rank]
        return self._int("ntasks_per_node", max(self.world_size // max(self.num_nodes, 1), 1))

    def _first_host(self) -> str:
        spec = self._str("nodelist")
        return expand_hostlist(spec)[0] if spec else LOOPBACK

    def _check_layout(self) -> None:
        per_node = self._int("ntasks_per_node", 0)
        if per_node and per_node * self.num_nodes != self.world_size:
            raise LaunchError(f"slurm: the step runs {self.world_size} tasks but {self.num_nodes} nodes x "
                              f"--ntasks-per-node={per_node} = {per_node * self.num_nodes}: drop -n/--ntasks "
                              f"(or set it to {per_node * self.num_nodes}) so every node runs "
                              f"{per_node} tasks")

    def _gpus_bound_per_task(self, gpus: int) -> bool:
        """--gpus-per-task=1 makes SLURM show each task only its own GPU: it is device 0."""
        per_task = self._str("gpus_per_task", "")
        digits = per_task.rpartition(":")[2]  # "1" or "gpu:1" / "a100:1"
        return digits.isdigit() and int(digits) == gpus

    def _check_gpus(self, gpus: int) -> None:
        if self._gpus_bound_per_task(gpus):
            self._bound_device = 0
            return
        # more tasks than GPUs never works; fewer wastes GPUs SLURM gave this job (GPUs merely
        # visible on a shared node without GPU allocation may belong to someone else: warn only)
        allocated = self._str("gpus_allocated") is not None
        if self.local_world_size > gpus or (allocated and self.local_world_size < gpus):
            raise LaunchError(f"slurm: {self.local_world_size} task(s) on node {self.node_rank} but it has {gpus} "
                              f"GPU(s): use {self._procs_hint(gpus)} with --gpus-per-node={gpus}")
        super()._check_gpus(gpus)


# ----------------------------------------------------------------------------- MPI launchers

class _MpiFamilyEnvironment(ClusterEnvironment):
    """Ranks started by an MPI launcher without ``launch.mpi``: the launcher says who is who, but
    not where rank 0 listens. One node: loopback. Several: MASTER_ADDR must be exported."""

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.rank = self._int("rank")
        self.world_size = self._int("world_size")
        self.local_rank = self._int("local_rank", self.rank)
        self.local_world_size = self._int("local_world_size", self.world_size)
        # MPI places ranks in blocks by default (--map-by slot, hydra's default); a round-robin
        # placement only makes this label wrong, not the training
        self.node_rank = self.rank // max(self.local_world_size, 1)
        self.master_addr = self._master_addr()
        self.master_port = self._master_port()

    def _master_addr(self) -> str:
        addr = self.env.get("MASTER_ADDR", "").strip()
        if addr:
            return addr
        return LOOPBACK if self.local_world_size == self.world_size else ""


class OpenMPIEnvironment(_MpiFamilyEnvironment):
    """A rank started by Open MPI's mpirun/mpiexec/prterun."""

    name = "openmpi"
    VARS = {
        "rank": ("OMPI_COMM_WORLD_RANK",),
        "world_size": ("OMPI_COMM_WORLD_SIZE",),
        "local_rank": ("OMPI_COMM_WORLD_LOCAL_RANK",),
        "local_world_size": ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        # one value per job, the same on every rank (Open MPI 5 / PMIx, then Open MPI 4)
        "job_id": ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID"),
    }
    REQUIRED = ("rank", "world_size")
    PROCS_PER_NODE = "mpirun --map-by ppr:{n}:node"


class MPICHEnvironment(_MpiFamilyEnvironment):
    """A rank started by hydra: MPICH's or Intel MPI's mpiexec/mpirun (PMI-1/PMI-2)."""

    name = "mpich"
    VARS = {
        "rank": ("PMI_RANK",),
        "world_size": ("PMI_SIZE",),
        "local_rank": ("MPI_LOCALRANKID",),
        "local_world_size": ("MPI_LOCALNRANKS",),
        "job_id": ("PMI_JOBID", "SLURM_JOB_ID"),  # hydra exports no job id of its own
    }
    REQUIRED = ("rank", "world_size")
    PROCS_PER_NODE = "mpiexec -ppn {n}"


class PMIxEnvironment(_MpiFamilyEnvironment):
    """A rank started by a PMIx launcher other than Open MPI (prun, flux, srun --mpi=pmix inside an
    odd setup). PMIx gives the rank but not the world size in the environment."""

    name = "pmix"
    VARS = {
        "rank": ("PMIX_RANK",),
        "world_size": ("WORLD_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS"),
        "local_rank": ("LOCAL_RANK", "SLURM_LOCALID"),
        "local_world_size": ("LOCAL_WORLD_SIZE",),
        "job_id": ("PMIX_NAMESPACE", "SLURM_JOB_ID"),
    }
    REQUIRED = ("rank",)
    PROCS_PER_NODE = "{n} ranks per node"

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        env = dict(os.environ if environ is None else environ)
        if self._lookup(env, "world_size") is None:
            raise LaunchError(f"pmix: PMIX_RANK={env['PMIX_RANK']} but the launcher exports no world size: "
                              "start through `python -m launch.mpi SCRIPT ...` (it asks MPI) or export WORLD_SIZE")
        super().__init__(env)


# ----------------------------------------------------------------------------- Kubernetes

class PyTorchJobEnvironment(ClusterEnvironment):
    """A pod of Kubeflow's PyTorchJob that runs the script itself: one process per pod.

    The operator gives each pod MASTER_ADDR (the master pod's service), MASTER_PORT, WORLD_SIZE
    (the number of pods) and RANK (the pod's index), but no LOCAL_RANK: each pod is a node with
    one process, local rank 0. A pod whose command is torchrun gets torchrun's variables instead.
    """

    name = "pytorchjob"
    VARS = {
        "rank": ("RANK",),
        "world_size": ("WORLD_SIZE",),
        "master_addr": ("MASTER_ADDR",),
        "master_port": ("MASTER_PORT",),
        # torchelastic's own variables: present means torchrun started us (TorchElasticEnvironment)
        "elastic": ("LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE"),
        # the operator's processes-per-pod request (nprocPerNode), meant for torchrun in the pod
        "nproc_per_pod": ("PET_NPROC_PER_NODE",),
    }
    REQUIRED = ("rank", "world_size", "master_addr", "master_port")
    PROCS_PER_NODE = ("{n} processes per pod (container command `torchrun --nproc-per-node={n} ...`, "
                      "PyTorchJob nprocPerNode: {n})")

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return super().detect(environ) and cls._lookup(environ, "elastic") is None

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.rank = self._int("rank")
        self.world_size = self._int("world_size")
        self.local_rank, self.local_world_size = 0, 1
        self.node_rank = self.rank  # one process per pod: the pod's index is the node's
        self.master_addr = self._str("master_addr") or ""
        self.master_port = self._master_port()

    def _check_layout(self) -> None:
        wanted = self._str("nproc_per_pod", "1")
        if wanted.isdigit() and int(wanted) > 1:
            raise LaunchError(f"pytorchjob: the job asks for {wanted} processes per pod (PET_NPROC_PER_NODE) "
                              f"but the pod ran the script directly, as one process: make the container "
                              f"command `torchrun --nproc-per-node={wanted} SCRIPT ...`")


# ----------------------------------------------------------------------------- no launcher

class SingleProcessEnvironment(ClusterEnvironment):
    """No launcher: one process, rank 0 of 1."""

    name = "single"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return True

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.rank = self.local_rank = self.node_rank = 0
        self.world_size = self.local_world_size = 1
        self.master_addr = LOOPBACK
        self.master_port = self._master_port()

    def validate(self, gpus_per_node: int = 0) -> None:
        tasks = self.env.get("SLURM_NTASKS", "1")
        if tasks.isdigit() and int(tasks) > 1:
            # a batch script that forgot `srun`: SLURM reserved N tasks, only one runs
            log.warning("single: this SLURM job asked for %s tasks but only this process runs; "
                        "start the script with `srun` to run one task per GPU", tasks)
        super().validate(gpus_per_node)

    def _check_gpus(self, gpus: int) -> None:
        """One process may drive several GPUs (nd/DataParallel): nothing to check."""


ENVIRONMENTS: Sequence[Type[ClusterEnvironment]] = (
    MpiLaunchEnvironment, TorchElasticEnvironment, SlurmEnvironment, OpenMPIEnvironment,
    MPICHEnvironment, PMIxEnvironment, PyTorchJobEnvironment, SingleProcessEnvironment,
)


def detect(environ: Optional[Mapping[str, str]] = None) -> ClusterEnvironment:
    """The first environment whose variables are present (launch.mpi/torchrun first, single last)."""
    env = os.environ if environ is None else environ
    for cls in ENVIRONMENTS:
        if cls.detect(env):
            found = cls(env)
            log.debug("detected %s", found.describe())
            return found
    raise AssertionError("unreachable: SingleProcessEnvironment always matches")
