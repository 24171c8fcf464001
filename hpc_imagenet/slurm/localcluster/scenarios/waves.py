"""Running scenarios at once on one local cluster, in waves. Most of a fault scenario's time is
waiting (a collective timeout, the requeue hold, a job's end, a slurmd coming back) rather than
training: each scenario (submit, inject, wait, check) runs in a thread, all of a wave together
(at most ``at_once``), and its outcome is its Future.

A wave maps a name to a scenario and the nodes its jobs are pinned to (``None``: anywhere), so that
a fault one scenario injects into a node never reaches another's job. A pin is a node list
(``"node1,node2"``: ``--nodelist``) or, for a job that must be free to move (a requeue after a node
failure cannot wait for a listed node), the sbatch options themselves (``("--exclude=node1",)``).
A wave ends with every node idle, so the next wave starts on a clean cluster.

:data:`FAULT_WAVES` and :data:`RECOVERY_WAVES` are the fault table's scenarios by name; the faults
benchmark runs them one at a time (its times are then each fault's alone), the tests all of a wave
at once.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Collection, Dict, Optional, Sequence, Tuple, Union

from hpc_imagenet.slurm import client
from hpc_imagenet.slurm.localcluster.cluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.scenarios import faults, recovery

# (cluster, data, folder, extra sbatch options) -> the measurement (or None); raises what went wrong
Scenario = Callable[[SlurmCluster, Path, Path, Sequence[str]], object]
Pin = Union[None, str, Tuple[str, ...]]  # anywhere, a --nodelist, or sbatch options
Wave = Dict[str, Tuple[Scenario, Pin]]

# Wave 1: the network loss takes node2's veth down (node1 + node2: rank 1 on node2, where no other job
# runs); the killed slurmd is node4's (node3 + node4: no other job there launches a step or ends). Wave 2,
# alone: the 4-node job needs every node up and reachable, and its release waits for no node to be
# completing, which the killed slurmd's job may stay for up to SlurmdTimeout. The full disk needs no
# cluster (a tmpfs on this host): it runs in a wave of its own.
FAULT_WAVES: Sequence[Wave] = (
    {"network-loss": (faults.network_loss, "node1,node2"), "slurmd-killed": (faults.slurmd_killed, "node3,node4")},
    {"fewer-nodes": (faults.fewer_nodes, None)},
    {"disk-full": (faults.disk_full, None)},
)

# The kills and the stop reach only their own job's processes; the node failure kills every process of
# its victim node and takes it DOWN. Wave 1: the node failure may use node2-node4 (--exclude, not
# --nodelist: its requeued run must be free to leave the DOWN node); its victim is the second node of its
# first run, so node3 or node4, which no other job uses, and it requeues onto the two others. The kills
# and the stop share node1 + node2. Wave 2: the torchrun jobs (slurm/ddp_1node.sh asks for all 32 CPUs of
# a node) would hold back any job sharing their node, and wave 1 has no node left for them: one node each.
RECOVERY_WAVES: Sequence[Wave] = (
    {"node-failure": (recovery.node_failure, ("--exclude=node1",)),
     "rank-killed": (recovery.rank_killed, "node1,node2"),
     "node-processes-killed": (recovery.node_processes_killed, "node1,node2"),
     "stopped-rank": (recovery.stopped_rank, "node1,node2")},
    {"torchrun-worker-killed": (recovery.torchrun_restart, "node1"),
     "repeating-failure": (recovery.repeating_failure, "node2")},
)

WAVES: Sequence[Wave] = (*FAULT_WAVES, *RECOVERY_WAVES)
NAMES = [name for wave in WAVES for name in wave]


def run_wave(cluster: SlurmCluster, data: Path, wave: Wave, folder: Callable[[str], Path],
             only: Optional[Collection[str]] = None, at_once: Optional[int] = None) -> Dict[str, Future]:
    """Run WAVE's scenarios (ONLY those, where given) on CLUSTER, AT_ONCE at a time (default: all),
    each in its own FOLDER(name); their outcomes by name, once every one has ended and every node is
    idle again."""
    chosen = {name: how for name, how in wave.items() if only is None or name in only}
    futures: Dict[str, Future] = {}
    if not chosen:
        return futures
    with ThreadPoolExecutor(at_once or len(chosen)) as pool:  # leaving the block waits for all
        for name, (scenario, nodes) in chosen.items():
            pin = [f"--nodelist={nodes}"] if isinstance(nodes, str) else list(nodes or ())
            futures[name] = pool.submit(scenario, cluster, data, folder(name), pin)
    wait(futures.values())
    if any(future.exception() for future in futures.values()):  # a failed scenario may leave its job
        client.cancel_mine(cluster.env)
    cluster.wait_idle(timeout=300)
    return futures
