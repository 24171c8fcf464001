"""``python -m hpc_imagenet.slurm.jobchain``: ImageNet's download to evaluated, exported weights and a report, as one
chain of SLURM jobs.

Stages, each a batch file written with :mod:`hpc_imagenet.slurm.generate` (the site's options) and submitted with a
dependency on the one before (``afterok``; the report ``afterany``, so a failed run reports what it got):

    plan      one job: index the archives (headers only), fix the shards' plan
    prepare   a job array: each task writes its share of the shards (resumable, idempotent)
    check     one job: every planned shard is there, the index, each sample decodes, SHA256SUMS
    train     the generated training batch file (requeue, restarts, staging as ever)
    evaluate  the best and the EMA weights on the validation set, one record each
    export    torchvision state dicts, safetensors, the model card (hpc_imagenet.imagenet.export)
    report    the harness's per-tag report of the run (its command, python -m hpc_imagenet.harness.jobchain_report)

Modules: ``chain_commands`` (the command line), ``chain`` (the batch files and their submission), ``state`` (the
chain's JSON and each stage's state), ``preflight`` (checks before anything is submitted),
``prepare_tasks`` and ``tasks`` (what runs inside the jobs).
"""
