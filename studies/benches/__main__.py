"""``python -m studies.benches overlap|region|prepare [flags]``, ``python -m studies.benches report``."""
from studies.cli import run_as_main
from studies.benches.command import main

if __name__ == "__main__":
    run_as_main(main)
