"""The error every bad setting raises: the entry scripts print its one line and exit 2."""


class ConfigError(ValueError):
    """A flag value that cannot work; the message says what to change."""
