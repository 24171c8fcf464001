"""``python -m hpc_imagenet.imagenet --variant nd|dp|ddp|amp ...``: any variant from one place."""
import sys

if __name__ == "__main__":
    # first: a stop signal during the slow imports must not be lost
    from hpc_imagenet.imagenet.process import preemption

    preemption.install_early()
    from hpc_imagenet.imagenet.run.train_command import main

    sys.exit(main("any"))
