"""The one error of this package: a launch environment that cannot work, with a message saying what to change."""


class LaunchError(RuntimeError):
    """The launch environment is inconsistent; the message says what to change."""
