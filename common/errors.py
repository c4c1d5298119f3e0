"""kb's error bases and the one map from errors to exit codes, for kb-build and kb alike.

Every error a user can act on is a ``KbError``: its message is one line, its class says the exit
status. Both CLIs print ``PROG: error: MESSAGE`` on stderr and exit with ``exit_code(e)``.

    0  ok (also a search with no results)
    1  failure: a build that cannot finish, a model that cannot load, an unexpected error
    2  usage: a bad flag, a bad kb.toml, bad search input
    3  the artifact is missing, unreadable, corrupt or not an artifact
    4  the artifact's format version is not supported by this kb
    5  an optional extra a flag needs is not installed (kb-build --executor ray without ray)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_ARTIFACT = 3
EXIT_VERSION = 4
EXIT_MISSING_EXTRA = 5


class KbError(Exception):
    """A failure the user can act on (exit 1 unless a subclass says otherwise)."""

    exit_code = EXIT_FAIL


class UsageError(KbError):
    """Bad input from the user: flags, kb.toml, a search request (exit 2)."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """kb.toml is malformed or holds a key or value kb does not accept (exit 2)."""


class ArtifactError(KbError):
    """The file cannot be used as an artifact (exit 3)."""

    exit_code = EXIT_ARTIFACT


class UnsupportedVersion(ArtifactError):
    """The artifact's format is older or newer than this kb reads (exit 4)."""

    exit_code = EXIT_VERSION


class ModelError(KbError):
    """A model is missing, invalid, or could not be fetched or converted (exit 1)."""


class MissingExtra(KbError):
    """A flag needs an optional extra that is not installed; the message names the pip install (exit 5)."""

    exit_code = EXIT_MISSING_EXTRA


def error_line(e: BaseException) -> str:
    """The first line of ``e``'s message (at most 200 characters), or its class's name when it has
    none: how a library's error is quoted inside one of kb's one-line messages."""
    s = str(e).strip()
    return s.splitlines()[0][:200] if s else type(e).__name__


def exit_code(e: BaseException) -> int:
    """The exit status for ``e``: its class's for a KbError, 1 for anything else."""
    return e.exit_code if isinstance(e, KbError) else EXIT_FAIL
