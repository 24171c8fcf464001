"""One module per launcher family, each a small :class:`hpc_imagenet.launch.envs.base.ClusterEnvironment` subclass that
reads
its launcher's variables; :mod:`hpc_imagenet.launch.launchers` lists them and
:func:`hpc_imagenet.launch.environment.detect` picks one."""
