"""From a command line to a running trainer: parse (no torch), place the processes, set up the process
group, build the run's parts and start the loop.

imagenet/run/README.md has a line per module. This file imports nothing: the entry scripts import
``imagenet.process.preemption`` before torch, and ``imagenet.run.cli`` parses without it."""
