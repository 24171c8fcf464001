"""One module per launcher family, each a small :class:`launch.envs.base.ClusterEnvironment` subclass that reads
its launcher's variables; :mod:`launch.launchers` lists them and :func:`launch.environment.detect` picks one."""
