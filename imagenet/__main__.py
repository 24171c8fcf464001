"""``python -m imagenet --variant nd|dp|ddp|amp ...``: any variant from one place."""
import sys

if __name__ == "__main__":
    from imagenet.process import preemption  # first: a stop signal during the slow imports must not be lost

    preemption.install_early()
    from imagenet.run.cli import main

    sys.exit(main("any"))
