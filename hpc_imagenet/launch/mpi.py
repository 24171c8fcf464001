"""Run a training script under an MPI launcher, with torch's rendezvous bootstrapped over MPI.

    mpirun -np 8 python -m hpc_imagenet.launch.mpi imagenet/imagenet_ddp.py -a resnet50 /data/imagenet
    mpiexec -n 8 -ppn 4 -f hosts python -m hpc_imagenet.launch.mpi imagenet/imagenet_ddp.py ...
    srun --mpi=pmix python -m hpc_imagenet.launch.mpi imagenet/imagenet_ddp.py ...

mpi4py tells every rank its place (ranks on one node share memory, which gives the local rank
and the node index); rank 0 picks an address the other nodes can route to (never a loopback
alias such as 127.0.1.1) and a port (MASTER_PORT, else one derived from the SLURM job id, else a
free one) and broadcasts both. Each rank then exports RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and runs the script in this process with its own
argv, so ``hpc_imagenet.launch.environment.detect()`` sees torch's usual variables. MPI stays initialised
only so that a failing rank can ``MPI_Abort`` the whole job instead of leaving its peers hanging.

``python -m hpc_imagenet.launch.mpi --library`` (outside the launcher) prints which MPI library mpi4py loads
here, without initialising MPI: batch files log it next to the ``mpirun`` they start.
"""
from __future__ import annotations

import fcntl
import ipaddress
import logging
import os
import runpy
import socket
import struct
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from hpc_imagenet.launch.envs.torchrun import MPI_MARKER
from hpc_imagenet.launch.ports import LOOPBACK, derive_port, free_port

log = logging.getLogger(__name__)

USAGE = ("usage: mpirun -np N python -m hpc_imagenet.launch.mpi SCRIPT [ARGS...]  (or: ... python -m "
         "hpc_imagenet.launch.mpi -m MODULE [ARGS...])")
EXIT_USAGE = 2
# Variables that prove an MPI-capable launcher started this process, and the world size it meant.
LAUNCHER_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "PALS_SIZE",
                      "SLURM_STEP_NUM_TASKS")
LAUNCHER_MARKERS = LAUNCHER_SIZE_VARS + ("PMIX_RANK", "PMI_RANK", "PMI_FD", "PALS_RANKID")
# MPI_Abort takes the job down at once, while the launcher forwards each rank's output on its own
# (MPICH's hydra proxies, Open MPI's daemons): lines a failing rank wrote just before it could be
# lost (seen with MPICH under load: not even the traceback reached the log). The pause lets them
# through; it costs a second of a job that is failing anyway.
ABORT_GRACE_S = 1.0
_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


class MpiLaunchError(RuntimeError):
    """hpc_imagenet.launch.mpi cannot start; the message says what to change."""


@dataclass(frozen=True)
class Layout:
    """This rank's place in the job, as torch's env:// variables."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    library: str

    def environ(self) -> Dict[str, str]:
        return {"RANK": str(self.rank), "WORLD_SIZE": str(self.world_size), "LOCAL_RANK": str(self.local_rank),
                "LOCAL_WORLD_SIZE": str(self.local_world_size), "GROUP_RANK": str(self.node_rank),
                "GROUP_WORLD_SIZE": str(self.num_nodes), "MASTER_ADDR": self.master_addr,
                "MASTER_PORT": str(self.master_port), MPI_MARKER: self.library}


# ----------------------------------------------------------------------------- addresses

def _usable(addr: str) -> bool:
    ip = ipaddress.ip_address(addr)
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified)


def local_addresses() -> List[str]:
    """This host's IPv4 addresses other nodes might reach: its interfaces, then its name's lookup."""
    found: List[str] = []
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
                found.append(socket.inet_ntoa(packed[20:24]))
            except OSError:
                continue  # an interface without an IPv4 address
    except (OSError, AttributeError):
        pass  # not Linux: the name lookup below still works
    finally:
        probe.close()
    try:
        found += [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    except OSError:
        pass
    return list(dict.fromkeys(a for a in found if _usable(a)))


def route_source(remote: str) -> Optional[str]:
    """The local address the kernel would use to reach REMOTE (a UDP connect sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((remote, 9))
            return s.getsockname()[0]
    except OSError:
        return None


def choose_master_addr(environ: Mapping[str, str], own: Sequence[str], remote: Sequence[str],
                       num_nodes: int) -> str:
    """Rank 0's address as the other nodes can reach it.

    OWN: rank 0's usable addresses; REMOTE: usable addresses of the other nodes' ranks.
    """
    if environ.get("MASTER_ADDR", "").strip():
        return environ["MASTER_ADDR"].strip()
    if num_nodes == 1:
        return LOOPBACK  # every rank is on this host: loopback always works
    for peer in remote:  # the source address of the route to a peer is routable from that peer
        src = route_source(peer)
        if src and _usable(src):
            return src
    if own:
        return own[0]
    raise MpiLaunchError(f"rank 0 ({socket.gethostname()}) has no address but loopback that other nodes could "
                         "reach: export MASTER_ADDR=<its IP on the cluster network> (mpirun -x MASTER_ADDR)")


def choose_master_port(environ: Mapping[str, str]) -> int:
    """MASTER_PORT, else derived from the SLURM job id (stable, differs between jobs), else free."""
    text = environ.get("MASTER_PORT", "").strip()
    if text:
        if not text.isdigit() or not 0 < int(text) < 65536:
            raise MpiLaunchError(f"MASTER_PORT={text!r} is not a port number (1-65535)")
        return int(text)
    job = environ.get("SLURM_JOB_ID", "").strip()
    return derive_port(job) if job else free_port()


# ----------------------------------------------------------------------------- MPI side

def import_mpi() -> Any:
    """mpi4py's MPI module (this initialises MPI), or a one-line error saying how to get it."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise MpiLaunchError("hpc_imagenet.launch.mpi needs mpi4py: pip install mpi4py (on a cluster, build it "
                             "against the "
                             "site MPI: module load <mpi>; pip install --no-binary=mpi4py mpi4py)") from None
    except RuntimeError as e:  # mpi4py is there but finds no MPI library
        first = str(e).strip().splitlines()[0] if str(e).strip() else "no MPI library"
        raise MpiLaunchError(f"mpi4py cannot load an MPI library ({first}): module load your site's MPI (or "
                             "point MPI4PY_LIBMPI at its libmpi.so)") from None
    return MPI


def _mapped_libmpi() -> Optional[str]:
    """Path of the libmpi this process has mapped (Linux /proc/self/maps), None if none or unknown."""
    try:
        with open("/proc/self/maps") as maps:
            paths = [line.split()[-1] for line in maps if "/libmpi" in line]
    except OSError:
        return None
    return os.path.realpath(paths[0]) if paths else None


def loaded_library() -> Optional[Dict[str, Optional[str]]]:
    """The MPI library of this process (MPI_Get_library_version's first line, the MPI standard, the
    file), or None where mpi4py's MPI module was never imported: this never loads or initialises MPI."""
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is None:
        return None
    try:
        text = MPI.Get_library_version().replace("\0", "")  # Open MPI 4 pads it with NULs
        version = " ".join(text.strip().splitlines()[0].split())
        standard = "%d.%d" % MPI.Get_version()
    except Exception:  # an MPI module that cannot answer is not worth failing a record over
        return None
    return {"library": version, "standard": standard, "file": _mapped_libmpi()}


def probe_library() -> str:
    """One line: the MPI library mpi4py loads in this environment, loaded without MPI_Init (for
    batch logs: ``python -m hpc_imagenet.launch.mpi --library``, run outside the MPI launcher)."""
    try:
        import mpi4py
    except ImportError:
        return "mpi4py is not installed"
    mpi4py.rc.initialize = mpi4py.rc.finalize = False  # load the library only; this is not a rank
    try:
        from mpi4py import MPI  # noqa: F401  (importing it loads libmpi, which is what is probed)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "no MPI library"
        return f"mpi4py {mpi4py.__version__} finds no MPI library ({first})"
    found = loaded_library() or {}
    return f"mpi4py {mpi4py.__version__} loads {found.get('library')} from {found.get('file') or '?'}"


def library_name(version: str) -> str:
    """Short name of the MPI library from MPI_Get_library_version()."""
    text = version.lower()
    for needle, name in (("open mpi", "openmpi"), ("intel", "intelmpi"), ("mvapich", "mvapich"),
                         ("mpich", "mpich")):
        if needle in text:
            return name
    return "mpi"


def launcher_size(environ: Mapping[str, str]) -> Optional[int]:
    for key in LAUNCHER_SIZE_VARS:
        value = environ.get(key, "").strip()
        if value.isdigit():
            return int(value)
    return None


def check_started_by_launcher(environ: Mapping[str, str]) -> None:
    if not any(environ.get(k) for k in LAUNCHER_MARKERS):
        raise MpiLaunchError(f"hpc_imagenet.launch.mpi was not started by an MPI launcher; {USAGE}")


def check_world(size: int, environ: Mapping[str, str], library: str) -> None:
    """MPI must see the ranks the launcher started; else mpi4py's MPI is not the launcher's."""
    expected = launcher_size(environ)
    if expected is not None and size != expected:
        hint = ("srun needs --mpi=pmix (or pmi2) so MPI sees its peers"
                if "SLURM_STEP_NUM_TASKS" in environ and "OMPI_COMM_WORLD_SIZE" not in environ
                and "PMI_SIZE" not in environ else
                "mpi4py uses a different MPI library than the launcher: run the mpirun/mpiexec of the MPI "
                "mpi4py was built with, or set MPI4PY_LIBMPI to the launcher's libmpi")
        raise MpiLaunchError(f"the launcher started {expected} ranks but MPI ({library}) sees {size}: {hint}")


def bootstrap(comm: Any, MPI: Any, environ: Mapping[str, str]) -> Layout:
    """Agree on ranks, node layout, master address and port; the same Layout fields on every rank."""
    rank, size = comm.Get_rank(), comm.Get_size()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    local_rank, local_size = node.Get_rank(), node.Get_size()
    leader = int(local_rank == 0)
    # nodes are numbered in the order of their lowest rank
    before = comm.exscan(leader)
    node_rank = node.bcast((before or 0) if leader else None, root=0)
    num_nodes = comm.allreduce(leader)
    node.Free()
    peers = comm.gather((node_rank, local_addresses()), root=0)
    answer: Tuple[str, Any] = ("", None)
    if rank == 0:
        try:
            remote = [a for n, addrs in peers if n != 0 for a in addrs]
            answer = ("ok", (choose_master_addr(environ, peers[0][1], remote, num_nodes),
                             choose_master_port(environ)))
        except MpiLaunchError as e:
            answer = ("error", str(e))
    status, value = comm.bcast(answer, root=0)
    if status == "error":
        raise MpiLaunchError(value if rank == 0 else "")
    addr, port = value
    return Layout(rank, size, local_rank, local_size, node_rank, num_nodes, addr, port,
                  library_name(MPI.Get_library_version()))


def thread_budget(local_world_size: int) -> int:
    """Cores this rank may use: its CPU binding, or the node's share when it is not bound."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    if cores == (os.cpu_count() or cores):
        cores //= max(local_world_size, 1)
    return max(cores, 1)


def export(layout: Layout) -> None:
    os.environ.update(layout.environ())
    # as torchrun does: N ranks each with every core's worth of OpenMP threads thrash the node
    os.environ.setdefault("OMP_NUM_THREADS", str(thread_budget(layout.local_world_size)))


# ----------------------------------------------------------------------------- running the target

def parse_target(argv: Sequence[str]) -> Tuple[str, str, List[str]]:
    """('path', SCRIPT, ARGS) or ('module', NAME, ARGS)."""
    args = list(argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args or args[0] in ("-h", "--help"):
        raise MpiLaunchError(USAGE)
    if args[0] == "-m":
        if len(args) < 2:
            raise MpiLaunchError(f"-m needs a module name; {USAGE}")
        return "module", args[1], args[2:]
    if args[0].startswith("-"):
        raise MpiLaunchError(f"unknown option {args[0]}; {USAGE}")
    if not os.path.isfile(args[0]):
        raise MpiLaunchError(f"no such script: {args[0]} (run from the directory the path is relative to)")
    return "path", args[0], args[1:]


def run_target(kind: str, target: str, args: List[str]) -> None:
    if kind == "module":
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(target))  # as `python SCRIPT` would
        runpy.run_path(target, run_name="__main__")


def print_script_traceback(exc: BaseException) -> None:
    """The traceback from the script's frames on: hpc_imagenet.launch.mpi's and runpy's own frames are noise."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and (
            tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__) or "runpy" in tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)
    sys.stderr.flush()


def exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    return 1


def abort(comm: Any, rank: int, size: int, code: int) -> None:
    print(f"hpc_imagenet.launch.mpi: rank {rank} failed (exit status {code}); aborting all {size} ranks",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    time.sleep(ABORT_GRACE_S)
    comm.Abort(code)


def run_guarded(comm: Any, kind: str, target: str, args: List[str]) -> int:
    """Run the target; any failure on this rank aborts the whole MPI job so no peer waits forever."""
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        run_target(kind, target, args)
        code = 0
    except SystemExit as e:
        code = exit_code(e)
    except KeyboardInterrupt:
        code = 130
    except BaseException as e:  # the script's own crash: show it, then take the job down
        print_script_traceback(e)
        code = 1
    if code and size > 1:
        abort(comm, rank, size, code)
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    environ = os.environ
    asked = list(sys.argv[1:] if argv is None else argv)
    if asked == ["--library"]:
        print(probe_library(), flush=True)
        return 0
    if asked in (["-h"], ["--help"]):  # asked for: the usage on stdout, success
        print(USAGE, flush=True)
        return 0
    try:
        kind, target, args = parse_target(sys.argv[1:] if argv is None else argv)
        check_started_by_launcher(environ)
        MPI = import_mpi()
        comm = MPI.COMM_WORLD
        library = library_name(MPI.Get_library_version())
        check_world(comm.Get_size(), environ, library)
        layout = bootstrap(comm, MPI, environ)
    except MpiLaunchError as e:
        if str(e):
            print(f"error: {e}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    export(layout)
    log.debug("rank %d/%d local %d/%d node %d/%d master %s:%d (%s)", layout.rank, layout.world_size,
              layout.local_rank, layout.local_world_size, layout.node_rank, layout.num_nodes,
              layout.master_addr, layout.master_port, layout.library)
    return run_guarded(comm, kind, target, args)


if __name__ == "__main__":
    from hpc_imagenet.launch.mpi import main  # under its one name, not a copy
    sys.exit(main())
