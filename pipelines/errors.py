"""Expected errors: what a user can fix (a bad config value, a missing, malformed or refused path, a
held lease). Every entry point prints such an error as one line naming the key or path and exits
with status 2; any other exception is a bug and keeps its traceback."""

from __future__ import annotations


class UserError(Exception):
    """An error the user can fix; its message names the config key or the path."""


class ConfigError(UserError, ValueError):
    """A config value, file or override that cannot be used."""


class MissingInput(UserError, FileNotFoundError):
    """An input path (corpus, table, model, a stage's output) that does not exist."""


class BadInput(UserError, ValueError):
    """An input that exists but cannot be used: malformed, the wrong schema, another vocabulary."""


class RefusedPath(UserError):
    """A path the product will not write into or delete: it did not make it, or it is a root."""


class LeaseHeld(UserError):
    """Another run holds the run_dir."""


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def error_record(error: UserError) -> dict:
    """A UserError as JSON fields, for a Ray Data UDF to return instead of raising: raised, it
    reaches the driver as Ray Data's UserCodeException, whose cause (ours) is not pickled with it."""
    return {"user_error": type(error).__name__, "message": str(error)}


def raise_error_record(record: dict) -> None:
    """Raise the UserError an `error_record` describes, when `record` is one."""
    if "user_error" in record:
        kinds = {kind.__name__: kind for kind in (ConfigError, MissingInput, BadInput, RefusedPath, LeaseHeld)}
        raise kinds.get(record["user_error"], UserError)(record["message"])


def find_user_error(error: BaseException | None) -> UserError | None:
    """The UserError behind `error`, looking through causes and Ray's wrappers (a RayTaskError
    keeps the task's exception in `.cause`)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        cause = getattr(error, "cause", None)  # Ray's wrapper: its own message carries a traceback
        if isinstance(cause, BaseException):
            error = cause
            continue
        if isinstance(error, UserError):
            return error
        if type(error).__name__ in ("NoCredentialsError", "PartialCredentialsError"):  # botocore's
            return UserError(
                f"no usable AWS credentials for s3:// paths ({error}): set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or give the machine a role"
            )
        error = error.__cause__ or error.__context__
    return None


__all__ = [
    "BadInput",
    "ConfigError",
    "LeaseHeld",
    "MissingInput",
    "RefusedPath",
    "UserError",
    "error_record",
    "find_user_error",
    "one_line",
    "raise_error_record",
]
