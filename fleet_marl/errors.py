"""The error a command raises for bad user input: the CLI prints ``error: <message>`` and the
command's ``--help`` hint, and exits with code 2. It sits at the bottom of the package so that
every feature's command can raise it without importing the CLI."""


class UsageError(ValueError):
    """A bad command-line value: the message names the option, the value and what was expected."""


__all__ = ["UsageError"]
