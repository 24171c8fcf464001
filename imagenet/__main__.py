"""``python -m imagenet --variant nd|dp|ddp|amp ...``: any variant from one place."""
import sys

from imagenet.cli import main

if __name__ == "__main__":
    sys.exit(main("any"))
