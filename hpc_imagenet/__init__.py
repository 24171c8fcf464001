"""hpc-imagenet: train ImageNet ResNets with PyTorch on HPC clusters and measure how well it scales.

The one name the project installs, and the code's only home: every module has one import name.

- ``hpc_imagenet.imagenet``: the engine (settings, data, model, training loop, run set-up, recipes);
- ``hpc_imagenet.launch``: the launch environments, the launcher table, MPI, the per-node commands;
- ``hpc_imagenet.slurm``: the job shape, batch-file generation, submitit, the job chain, the local test cluster;
- ``hpc_imagenet.harness``: benchmark records, runners, analysis and reports.

A checkout keeps beside it what users run and read: ``imagenet/`` (the four entry scripts), ``slurm/`` (the
committed batch files), ``launch/`` (per-node commands), ``results/`` (records, reports, RESULTS.md: data).
"""
