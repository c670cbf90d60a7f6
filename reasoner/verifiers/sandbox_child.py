"""The program the code sandbox runs (as `python -I -S -c <this source>`); standard library only.

Reads {"code", "entry", "input", "block_sockets"} as JSON on stdin, runs `entry(input)` from the
model-written `code`, and writes {"ok", "value" | "error"} as JSON to the saved original stdout.
Before the payload runs it redirects fds 1 and 2 to /dev/null (a payload printing 100 MB costs
nothing and cannot forge the reply) and installs an audit hook, which Python code cannot remove,
that refuses: process creation (fork, exec, spawn, system, subprocess), writes or deletions outside
the working directory, loading ctypes (which would bypass the hook), and, when asked (no network
namespace available), socket creation.
"""

import json
import os
import sys

_PROCESS_EVENTS = {"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
                   "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg"}
_PATH_EVENTS = {"os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.symlink", "os.link",
                "os.chmod", "os.chown", "os.truncate", "os.utime", "shutil.rmtree", "os.replace"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _inside(path, root):
    if isinstance(path, int):
        return True  # an already-open descriptor was checked when it was opened
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    real = os.path.realpath(os.path.join(root, str(path)))
    return real == root or real.startswith(root + os.sep)


def _make_hook(root, block_sockets):
    def hook(event, args):
        if event in _PROCESS_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args[0] in ("ctypes", "_ctypes"):
            raise PermissionError("sandbox: importing ctypes is not allowed")
        if block_sockets and event.startswith("socket.") and event != "socket.getservbyname":
            raise PermissionError(f"sandbox: network access ({event}) is not allowed")
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags & _WRITE_FLAGS)
            if writing and path is not None and not _inside(path, root):
                raise PermissionError(f"sandbox: writing outside the working directory ({path!r})")
        elif event in _PATH_EVENTS:
            for arg in args[:2]:
                if isinstance(arg, (str, bytes)) and not _inside(arg, root):
                    raise PermissionError(f"sandbox: {event} outside the working directory ({arg!r})")
    return hook


def main():
    request = json.loads(sys.stdin.read())
    reply_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    root = os.path.realpath(os.getcwd())
    namespace = {"__name__": "__sandbox__", "__builtins__": __builtins__}
    sys.addaudithook(_make_hook(root, request.get("block_sockets", False)))
    try:
        exec(compile(request["code"], "<model code>", "exec"), namespace)
        entry = namespace.get(request.get("entry", "transform"))
        if not callable(entry):
            raise NameError(f"the code defines no function {request.get('entry', 'transform')!r}")
        reply = {"ok": True, "value": entry(request["input"])}
        text = json.dumps(reply)
    except BaseException as err:  # noqa: BLE001 - any failure of the payload is its test's error
        text = json.dumps({"ok": False, "error": f"{type(err).__name__}: {err}"[:2000]})
    os.write(reply_fd, text.encode())
    os._exit(0)


if __name__ == "__main__":
    main()
