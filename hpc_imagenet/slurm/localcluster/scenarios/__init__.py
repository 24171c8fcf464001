"""Fault and recovery scenarios on the local cluster: tiny real training jobs (generated batch
files, a 1.4 M-parameter ShuffleNet at 32 px, gloo) into which each scenario injects one fault, checks what follows and
measures it. ``python -m hpc_imagenet.harness.bench faults`` records them; the cluster tests assert on them.

- jobs.py: the tiny job, submitting it, releasing a requeued run, each run's state
- measure.py: the checks, the measurement a scenario returns, the work a fault cost
- faults.py: network loss, a killed slurmd, fewer nodes after a requeue, a full disk
- recovery.py: killed ranks, a node's processes killed, a node failure, a stopped rank, a
  failure repeating past the restart bound
- waves.py: the scenarios by name, in waves that can run at once on one cluster
"""
