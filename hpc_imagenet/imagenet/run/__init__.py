"""From a command line to a running trainer: parse (no torch), place the processes, set up the process
group, build the run's parts and start the loop.

hpc_imagenet/imagenet/run/README.md has a line per module. This file imports nothing: the entry scripts import
``hpc_imagenet.imagenet.process.preemption`` before torch, and ``hpc_imagenet.imagenet.run.train_command`` parses
without it."""
