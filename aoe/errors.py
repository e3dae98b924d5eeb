"""The one exception type for errors a user can cause (bad input, bad environment, bad files)."""


class AoeError(Exception):
    """A user-facing error: the message says what went wrong and what to do about it."""
