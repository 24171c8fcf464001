"""Bottom layer of results/: paths, record I/O and selection, constants shared by runners and reports."""
