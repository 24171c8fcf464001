"""Every launcher once: its name, how its ranks are recognised, how they meet, and the command for one node.

    python -m hpc_imagenet.launch --list                    # this table
    python -m hpc_imagenet.launch.manual --launcher NAME    # the per-node commands, for the launchers that have one
    python -m hpc_imagenet.slurm.generate --launcher NAME   # a batch file, for the launchers a SLURM job can run

Each :class:`Launcher` says
- ``environment``: the :class:`~hpc_imagenet.launch.envs.base.ClusterEnvironment` whose variables its ranks carry.
  :func:`hpc_imagenet.launch.environment.detect` tries the environments in this table's order and falls back to a
  single process, so an entry goes before any launcher whose variables it also carries (torchrun
  runs inside SLURM and MPI allocations, so it comes before them).
- ``init``: how the trainers join the process group: ``env://`` (the agent's own store) or ``tcp://``
  (rank 0's address and port, which the environment knows).
- ``agent`` and ``flags``: the command line for one node, ``python -m AGENT FLAGS SCRIPT ARGS`` (no
  agent: ``python SCRIPT FLAGS ARGS``, the script starts the node's processes itself).
- ``batch``: how a SLURM batch file starts it: one task per node (``NODE``, the agent starts the
  node's processes) or one task per training process (``PROCESS``); None: not offered there.

Adding a launcher is one :func:`register` call (a built-in one: an entry in ``_BUILTIN``) plus its
tests; a new kind of rank layout also needs its environment class in :mod:`hpc_imagenet.launch.envs`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple, Type

from hpc_imagenet.launch.envs.base import ClusterEnvironment
from hpc_imagenet.launch.envs.mpi import MPICHEnvironment, OpenMPIEnvironment, PMIxEnvironment
from hpc_imagenet.launch.envs.pytorchjob import PyTorchJobEnvironment
from hpc_imagenet.launch.envs.single import SingleProcessEnvironment
from hpc_imagenet.launch.envs.slurm import SlurmEnvironment
from hpc_imagenet.launch.envs.torchrun import MpiLaunchEnvironment, TorchElasticEnvironment

ENV_INIT = "env://"  # the agent's store: torchrun's workers must join it (their peers' keys live there)
TCP_INIT = "tcp://"  # rank 0 listens at the environment's master address and port
NODE = "node"  # in a batch file: one SLURM task per node, which starts that node's processes
PROCESS = "process"  # in a batch file: one SLURM task per training process
SINGLE = "single"  # no launcher: the engine's fallback
DIST_URL = "dist-url"  # the script spawns its node's processes itself (pytorch/examples' --dist-url)


@dataclass(frozen=True)
class Node:
    """What one node's command line depends on. Each value is written as given: plain text for a command
    typed by hand (its caller shell-quotes the whole line), or a quoted expansion such as
    ``"$SLURM_JOB_NUM_NODES"`` in a batch file."""

    nnodes: str
    nproc: str  # training processes on this node
    master_addr: Optional[str] = None  # None (torchrun): one node on its own, at a free port (--standalone)
    master_port: Optional[str] = None
    node_rank: Optional[str] = None  # None: not told here (c10d: by arrival; a batch file: on each node)
    rdzv_id: Optional[str] = None  # for a launcher with c10d: meet at this rendezvous, node ranks by arrival


Flags = Callable[[Node], List[str]]


@dataclass(frozen=True)
class Launcher:
    """One launcher (see the module docstring for each field's use)."""

    name: str  # what --launcher takes
    summary: str  # one line for `python -m hpc_imagenet.launch --list` and the --launcher help
    environment: Optional[Type[ClusterEnvironment]]  # None: the script spawns its ranks (no launcher variables)
    init: str = TCP_INIT
    meets: str = "at rank 0's address and port (MASTER_ADDR, MASTER_PORT)"  # how ranks meet, in words
    agent: Optional[str] = None  # the module run as `python -m AGENT` on each node
    console: Optional[str] = None  # the agent's console script (torchrun), used when the nodes run plain python
    flags: Optional[Flags] = None  # the command line for one node (None: none; started job-wide or by others)
    # `python -m hpc_imagenet.launch.manual` prints one mpirun line for a hostfile's nodes instead
    hostfile: bool = False
    node_rank_flag: Optional[str] = None  # the flag that tells the agent its node's rank (without c10d)
    script_flags: Tuple[str, ...] = ()  # flags it passes the script itself: the script's own arguments must not
    c10d: bool = False  # can meet at a c10d rendezvous (Node.rdzv_id): node ranks by arrival
    batch: Optional[str] = None  # NODE, PROCESS or None (see the module docstring)
    # the agent restarts failed workers itself and takes torchrun's --max-restarts and --no-python, with which a
    # batch file bounds those restarts by its start budget (hpc_imagenet/slurm/start_budget.py)
    restarts_workers: bool = False

    def node_command(self, node: Node, python: str, script: Tuple[str, ...]) -> List[str]:
        """The argv to run on one node (SCRIPT: the training script and its arguments)."""
        if self.flags is None:
            raise ValueError(f"the {self.name} launcher has no per-node command")
        if self.agent is None:  # the script itself takes the node's place (pytorch/examples' --dist-url)
            return [python, script[0], *self.flags(node), *script[1:]]
        runner = [self.console] if self.console and python == "python" else [python, "-m", self.agent]
        return [*runner, *self.flags(node), *script]


def _url_host(addr: str) -> str:
    return f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr


def _torchrun_flags(node: Node) -> List[str]:
    head = [f"--nnodes={node.nnodes}", f"--nproc-per-node={node.nproc}"]
    if node.master_addr is None:
        return [*head, "--standalone"]
    if node.rdzv_id is not None:
        return [*head, f"--rdzv-id={node.rdzv_id}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={node.master_addr}:{node.master_port}"]
    rank = [f"--node-rank={node.node_rank}"] if node.node_rank is not None else []
    return [*head, *rank, f"--master-addr={node.master_addr}", f"--master-port={node.master_port}"]


def _launch_flags(node: Node) -> List[str]:
    """torch.distributed.launch, spelled as the seed tutorial spells it."""
    rank = [f"--node_rank={node.node_rank}"] if node.node_rank is not None else []
    return [f"--nproc_per_node={node.nproc}", f"--nnodes={node.nnodes}", *rank, f"--master_addr={node.master_addr}",
            f"--master_port={node.master_port}"]


def _dist_url_flags(node: Node) -> List[str]:
    """pytorch/examples' node-level flags: the script spawns one process per GPU itself (NPROC empty: all)."""
    per_node = ["--procs-per-node", node.nproc] if node.nproc else []
    return ["--dist-url", f"tcp://{_url_host(node.master_addr)}:{node.master_port}", "--world-size", node.nnodes,
            "--rank", str(node.node_rank), *per_node]


# In detection order (see the module docstring); dist-url has no environment of its own.
_BUILTIN = (
    Launcher("mpi",
             "mpirun/mpiexec/srun --mpi=pmix + `python -m hpc_imagenet.launch.mpi SCRIPT`: ranks agree over mpi4py",
             MpiLaunchEnvironment, meets="at rank 0's address and a port, agreed over MPI by hpc_imagenet.launch.mpi",
             hostfile=True, batch=PROCESS),
    Launcher("torchrun", "torchrun (python -m torch.distributed.run): one agent per node starts its processes",
             TorchElasticEnvironment, ENV_INIT, "at the agent's store: static (--node-rank, --master-addr) or c10d",
             agent="torch.distributed.run", console="torchrun", flags=_torchrun_flags, node_rank_flag="--node-rank",
             c10d=True, batch=NODE, restarts_workers=True),
    Launcher("launch", "python -m torch.distributed.launch (the seed tutorial's form): one agent per node",
             TorchElasticEnvironment, ENV_INIT, "at the agent's store (--node_rank, --master_addr, --master_port)",
             agent="torch.distributed.launch", flags=_launch_flags, node_rank_flag="--node_rank",
             script_flags=("--local-rank", "--local_rank"), batch=NODE),
    Launcher("srun", "SLURM's srun: one task per training process", SlurmEnvironment,
             meets="at the allocation's first node, port derived from the job id", batch=PROCESS),
    Launcher("openmpi", "Open MPI's mpirun running the script directly", OpenMPIEnvironment,
             meets="at MASTER_ADDR (loopback on one node), port from the job id"),
    Launcher("mpich", "MPICH / Intel MPI (hydra) running the script directly", MPICHEnvironment,
             meets="at MASTER_ADDR (loopback on one node), port from the job id"),
    Launcher("pmix", "another PMIx launcher (prun, flux) running the script directly", PMIxEnvironment,
             meets="at MASTER_ADDR (loopback on one node), port from the job id"),
    Launcher("pytorchjob", "Kubeflow's PyTorchJob: one process per pod", PyTorchJobEnvironment,
             meets="at the master pod's service (MASTER_ADDR, MASTER_PORT)"),
    Launcher(DIST_URL, "pytorch/examples' --dist-url/--world-size/--rank: the script spawns a process per GPU",
             None, meets="at the --dist-url address", flags=_dist_url_flags,
             script_flags=("--dist-url", "--world-size", "--rank", "--procs-per-node")),
    Launcher(SINGLE, "no launcher: one process", SingleProcessEnvironment, meets="alone"),
)
REGISTRY: Dict[str, Launcher] = {entry.name: entry for entry in _BUILTIN}


def register(entry: Launcher, before: Optional[str] = None) -> None:
    """Add ENTRY (detected before the launcher named BEFORE, else after every other launcher)."""
    if entry.name in REGISTRY:
        raise ValueError(f"a launcher named {entry.name!r} is registered already")
    items = list(REGISTRY.items())
    at = next((i for i, (name, _) in enumerate(items) if name == before), len(items))
    items.insert(at, (entry.name, entry))
    REGISTRY.clear()
    REGISTRY.update(items)


def get(name: str) -> Launcher:
    return REGISTRY[name]


def by_hand() -> Tuple[str, ...]:
    """The launchers `python -m hpc_imagenet.launch.manual` prints commands for: one per node, or one mpirun line."""
    return tuple(name for name, entry in REGISTRY.items() if entry.flags is not None or entry.hostfile)


def in_batch_files() -> Tuple[str, ...]:
    """The launchers a generated SLURM batch file can run."""
    return tuple(name for name, entry in REGISTRY.items() if entry.batch is not None)


def detection_order() -> Tuple[Type[ClusterEnvironment], ...]:
    """The environments to try, in order; a single process is the fallback, not in the list."""
    seen: List[Type[ClusterEnvironment]] = []
    for entry in REGISTRY.values():
        env = entry.environment
        if env is not None and env is not SingleProcessEnvironment and env not in seen:
            seen.append(env)
    return tuple(seen)


def of(env: ClusterEnvironment) -> Launcher:
    """The launcher whose environment ENV is (the first entry, when several share one)."""
    for exact in (True, False):
        for entry in REGISTRY.values():
            cls = entry.environment
            if cls is not None and (type(env) is cls if exact else isinstance(env, cls)):
                return entry
    raise LookupError(f"no launcher registered for {type(env).__name__}")


def init_method(env: ClusterEnvironment) -> str:
    """Where ENV's trainers join the process group."""
    return ENV_INIT if of(env).init == ENV_INIT else f"tcp://{env.master_addr}:{env.master_port}"
