"""Pool targets for the jail tests: Z3 without the runner's file-option guard, and plain file access,
so that the tests can show the jail holds when the guard is bypassed. Standard library + z3 only."""

import os


def eval_unguarded(script: str) -> str:
    import z3

    context = z3.Context()
    try:
        return z3.Z3_eval_smtlib2_string(context.ref(), script)
    except z3.Z3Exception as err:
        return err.value.decode() if isinstance(err.value, bytes) else str(err.value)


def write_file(path: str) -> str:
    try:
        with open(path, "w") as f:
            f.write("escaped")
        return "written"
    except OSError as err:
        return f"{type(err).__name__}: {err.strerror}"


def identity() -> list:
    return [os.getuid(), os.getgid(), sorted(os.listdir("/work")), os.listdir("/tmp")]
