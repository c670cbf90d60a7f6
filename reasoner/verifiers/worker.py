"""Entry point of one verifier-pool worker: a clean `python -m reasoner.verifiers.worker` process.

It imports only the standard library at start (never JAX, transformers or torch), then serves
calls read from stdin and answers on a private duplicate of the original stdout, so that anything a
task prints cannot corrupt the protocol. A call names its function as "package.module:function";
the module is imported lazily on first use, so a worker that only runs Z3 loads only `z3`.

Frame format on both pipes: 4-byte big-endian length, then a pickle of a dict.
Request  {"id", "target", "args", "kwargs"}; reply {"id", "ok", "value" | "error", "elapsed_s"}.
"""

from __future__ import annotations

import importlib
import os
import pickle
import resource
import struct
import sys
import time
import traceback

_HEADER = struct.Struct(">I")


def read_frame(stream) -> object | None:
    """One pickled object from `stream`, or None at end of file."""
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    body = _read_exactly(stream, size)
    return None if body is None else pickle.loads(body)


def _read_exactly(stream, size: int) -> bytes | None:
    """`size` bytes, looping over short reads (an unbuffered pipe returns at most ~64 KiB per read)."""
    parts, missing = [], size
    while missing:
        chunk = stream.read(missing)
        if not chunk:
            return None
        parts.append(chunk)
        missing -= len(chunk)
    return b"".join(parts)


def write_frame(stream, obj: object) -> None:
    write_bytes(stream, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def write_bytes(stream, body: bytes) -> None:
    """One frame whose pickled body the caller already produced."""
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def resolve(target: str):
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"task target {target!r} must look like 'package.module:function'")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def jail_paths() -> list[str]:
    """What a jailed worker must still read: the interpreter, its packages and the repository."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return sorted({sys.prefix, sys.base_prefix, repo} | {p for p in sys.path if p and os.path.isdir(p)})


def serve(address_space_mb: int, *, jail: bool = False) -> int:
    """Serve calls until stdin closes. With `jail` (started by the pool under `unshare`), first
    lock this process down like the code sandbox (`sandbox_child.lock_down`)."""
    layers = {}
    if jail:
        from reasoner.verifiers.sandbox_child import lock_down

        # No NPROC cap: seccomp already refuses fork/exec, and the cap would count every
        # process of uid nobody on the host, the code sandbox's included.
        layers = lock_down(mount_ns=True, scratch_mb=16, expose=jail_paths(), nofile=256)
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    # Tasks may print; fd 0/1 now point at /dev/null so only the private pipes carry the protocol.
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    if address_space_mb > 0:
        limit = address_space_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if jail:
            layers["rlimits"] = True
    write_frame(replies, {"id": None, "ok": True, "value": os.getpid(), "elapsed_s": 0.0, "layers": layers})
    while True:
        request = read_frame(requests)
        if request is None:
            return 0
        start = time.perf_counter()
        try:
            value = resolve(request["target"])(*request.get("args", ()), **request.get("kwargs", {}))
            reply = {"id": request["id"], "ok": True, "value": value}
        except MemoryError as err:
            reply = {"id": request["id"], "ok": False, "error": f"MemoryError: {err}", "kind": "memory"}
        except BaseException as err:  # noqa: BLE001 - a task's failure is reported, never kills the worker
            text = "".join(traceback.format_exception_only(type(err), err)).strip()
            reply = {"id": request["id"], "ok": False, "error": text, "kind": "error",
                     "traceback": traceback.format_exc(limit=8)}
        reply["elapsed_s"] = time.perf_counter() - start
        try:
            write_frame(replies, reply)
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            write_frame(replies, {"id": request["id"], "ok": False, "kind": "error",
                                  "error": f"result of {request['target']} is not picklable: {err}",
                                  "elapsed_s": reply["elapsed_s"]})


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0, jail="--jail" in sys.argv[2:]))
