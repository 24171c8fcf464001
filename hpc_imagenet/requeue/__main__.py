"""``python -m hpc_imagenet.requeue SCRIPT [ARGS...]``: hpc_imagenet/requeue/runner.py."""

if __name__ == "__main__":
    from hpc_imagenet.requeue import listen

    listen()  # before the runner's own imports
    from hpc_imagenet.requeue.runner import leave, main

    leave(main())
