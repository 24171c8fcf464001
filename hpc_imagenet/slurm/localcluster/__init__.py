"""A real SLURM cluster on one machine, each node a network namespace: for trying the batch files
and the scaling sweep on a laptop-sized cluster (``python -m hpc_imagenet.slurm.localcluster``), and as the
cluster the tests and the faults benchmark run their jobs on. See README.md in this folder."""
from hpc_imagenet.slurm.localcluster.cluster import (FINAL_STATES, REQUIRE_ENV, SlurmCluster, reap_stale,
                                                     unavailable_reason)
from hpc_imagenet.slurm.localcluster.commands import ClusterError, ClusterUnavailable, wait_for

__all__ = ["FINAL_STATES", "REQUIRE_ENV", "ClusterError", "ClusterUnavailable", "SlurmCluster", "reap_stale",
           "unavailable_reason", "wait_for"]
