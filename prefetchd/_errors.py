"""Errors that end a prefetchd command with one line on stderr and exit code 2."""


class UsageError(Exception):
    """Bad input from the user (argument, URI, endpoint, bucket); the message names it."""
