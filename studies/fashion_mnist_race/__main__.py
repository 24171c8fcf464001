"""``python -m studies.fashion_mnist_race run [flags]``, ``python -m studies.fashion_mnist_race report``."""
from studies.cli import run_as_main
from studies.fashion_mnist_race.command import main

if __name__ == "__main__":
    run_as_main(main)
