"""This process in the job: its place in the process group, the collectives, the stop signal (see README.md)."""
