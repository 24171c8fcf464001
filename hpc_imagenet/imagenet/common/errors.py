"""Turning exceptions into the one-line messages users see (their exit statuses:
hpc_imagenet.imagenet.common.exit_codes)."""
from __future__ import annotations


def one_line(exc: BaseException) -> str:
    """The exception's message on one line.

    Errors raised in a DataLoader worker arrive wrapped in a multi-line text ending with the
    original "module.Class: message" line; only that message is kept.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    last = lines[-1] if lines[0].startswith("Caught ") else lines[0]
    head, sep, rest = last.partition(": ")
    if sep and head.replace(".", "").replace("_", "").isalnum() and head.split(".")[-1].endswith("Error"):
        return rest
    return last


class DataError(RuntimeError):
    """The dataset cannot be used; the message is one line naming the problem and the fix."""
