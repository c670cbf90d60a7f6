"""The program the code sandbox runs (as `python -I -S -c <this source>`), and the lock-down that
the sandbox and the Z3 workers share. Standard library only.

`lock_down` turns the calling process, started as root inside fresh namespaces by
`unshare --net --pid --mount --fork --kill-child --mount-proc`, into an unprivileged prisoner:
  1. mount namespace: every top-level directory except the system ones (/usr, /lib*, /bin, /sbin,
     /etc, /dev, /proc, /sys) is covered by an empty read-only tmpfs (host files, /root, /home,
     /work, /var disappear), the `expose` paths are bound back read-only, /tmp becomes a private
     tmpfs of `scratch_mb` owned by the prisoner (the only writable place, gone with the namespace),
     /dev/shm an empty read-only tmpfs, and `/` is remounted read-only; /proc is the pid
     namespace's own (from `--mount-proc`);
  2. rlimits: RLIMIT_AS, CPU, FSIZE, NPROC, NOFILE, CORE=0 (set while still root, then locked);
  3. uid/gid nobody (65534) with no supplementary groups: every capability is gone;
  4. no_new_privs and a seccomp filter (x86_64, aarch64): no fork/vfork/non-thread clone, no
     exec, no socket, no ptrace / mount / namespaces / bpf / keyctl / io_uring, clone3 -> ENOSYS
     (glibc then uses clone for threads, which stays allowed);
and returns the layers that are really active. Without namespaces (`mount_ns=False`, the weak
mode the caller must opt into) steps 2-4 still apply when running as root.

Sandbox child protocol: reads {"code", "entry", "input", "lock"} as JSON on stdin, writes one JSON
line {"layers": {...}} once locked down, then {"ok", "value" | "error", "limit"} to the saved
original stdout. Before the payload runs fds 1 and 2 point to /dev/null (printing costs nothing and
cannot forge the reply) and an audit hook, the last layer, refuses process creation, writes outside
the working directory, ctypes and (when asked) sockets.
"""

import json
import os
import platform
import resource
import struct
import sys

NOBODY = 65534
_KEEP_TOP = frozenset({"usr", "lib", "lib32", "lib64", "libx32", "bin", "sbin", "etc", "dev", "proc",
                       "sys"})
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC = 32, 4096, 16384
# Syscalls refused with EPERM (numbers per architecture; -1: the syscall does not exist there).
_DENY = {  # name: (x86_64, aarch64)
    "socket": (41, 198), "fork": (57, -1), "vfork": (58, -1), "execve": (59, 221),
    "execveat": (322, 281), "ptrace": (101, 117), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "unshare": (272, 97), "setns": (308, 268),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "bpf": (321, 280),
    "userfaultfd": (323, 282), "perf_event_open": (298, 241), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "io_uring_setup": (425, 425), "kexec_load": (246, 104),
    "init_module": (175, 105), "finit_module": (313, 273), "open_by_handle_at": (304, 265),
    "mknod": (133, -1), "mknodat": (259, 33),  # os.mkfifo / os.mknod create files no audit event reports
}
_CLONE = (56, 220)
_CLONE3 = (435, 435)
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_CLONE_THREAD = 0x00010000
_EPERM, _ENOSYS = 1, 38


def _libc():
    import ctypes  # trusted set-up code, before the payload; removed from sys.modules afterwards

    return ctypes, ctypes.CDLL(None, use_errno=True)


def _mount(libc, ctypes, source, target, fstype, flags, data=None) -> None:
    enc = (lambda s: None if s is None else os.fsencode(s))
    if libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype or source} on {target}: {os.strerror(err)}")


def _mount_jail(*, scratch_mb: int, expose, uid: int) -> None:
    """Steps 1 of the module docstring; the caller must be root in its own mount namespace."""
    ctypes, libc = _libc()
    _mount(libc, ctypes, None, "/", None, _MS_REC | (1 << 18))  # MS_PRIVATE: nothing leaks to the host
    exposed = []
    for path in sorted({os.path.realpath(p) for p in expose}):
        top = path.strip("/").split("/")[0]
        if top and top not in _KEEP_TOP and os.path.isdir(path):
            exposed.append((path, os.open(path, os.O_PATH | os.O_DIRECTORY)))
    hidden = []
    for name in sorted(os.listdir("/")):
        path = "/" + name
        if name in _KEEP_TOP or name == "tmp" or os.path.islink(path) or not os.path.isdir(path):
            continue
        _mount(libc, ctypes, "tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=64k,mode=755")
        hidden.append(path)
    # /tmp first, so that an exposed path under /tmp (a checkout there) is bound on top of it.
    _mount(libc, ctypes, "tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"size={max(1, scratch_mb)}m,mode=700,uid={uid},gid={uid}")
    for path, fd in exposed:
        if any(path != other and path.startswith(other + "/") for other, _ in exposed):
            os.close(fd)
            continue  # covered by an exposed parent
        os.makedirs(path, exist_ok=True)
        _mount(libc, ctypes, f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        _mount(libc, ctypes, None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
        os.close(fd)
    for path in hidden:
        _mount(libc, ctypes, None, path, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    if os.path.isdir("/dev/shm"):
        _mount(libc, ctypes, "tmpfs", "/dev/shm", "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
               "size=4k,mode=755")
    _mount(libc, ctypes, None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)
    os.chdir("/tmp")


def _seccomp_program(machine: str) -> bytes | None:
    """The BPF filter of step 4 as bytes of `struct sock_filter[]`, or None on another architecture."""
    arch = {"x86_64": 0, "aarch64": 1}.get(machine)
    if arch is None:
        return None
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JSET|K, RET|K
    allow, kill = 0x7FFF0000, 0x80000000
    errno = (lambda e: 0x00050000 | e)
    ins = [(ld, 0, 0, 4), (jeq, 1, 0, _AUDIT_ARCH[machine]), (ret, 0, 0, kill), (ld, 0, 0, 0)]
    if machine == "x86_64":  # x32 syscalls (bit 30) would dodge the numbers below
        ins += [(0x35, 0, 1, 0x40000000), (ret, 0, 0, errno(_EPERM))]  # JMP|JGE|K
    for numbers in _DENY.values():
        if numbers[arch] >= 0:
            ins += [(jeq, 0, 1, numbers[arch]), (ret, 0, 0, errno(_EPERM))]
    ins += [(jeq, 0, 1, _CLONE3[arch]), (ret, 0, 0, errno(_ENOSYS))]
    # clone: allowed only with CLONE_THREAD in its flags (args[0], low word at offset 16).
    ins += [(jeq, 0, 4, _CLONE[arch]), (ld, 0, 0, 16), (jset, 1, 0, _CLONE_THREAD),
            (ret, 0, 0, errno(_EPERM)), (ret, 0, 0, allow)]
    ins += [(ret, 0, 0, allow)]
    return b"".join(struct.pack("HBBI", *i) for i in ins)


def _install_seccomp() -> bool:
    program = _seccomp_program(platform.machine())
    if program is None:
        return False
    ctypes, libc = _libc()
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
    fprog_buf = ctypes.create_string_buffer(fprog, len(fprog))
    ul = ctypes.c_ulong
    if libc.prctl(38, ul(1), ul(0), ul(0), ul(0)) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    return libc.prctl(22, ul(2), ul(ctypes.addressof(fprog_buf)), ul(0), ul(0)) == 0


def _become_reaper() -> None:
    """Fork; the parent stays PID 1 of the namespace (root, closing every descriptor) and reaps
    until the child exits, then exits with its status (128 + signal for a signal). Returns in the
    child only. Why: a namespace's PID 1 ignores every signal it has no handler for, the kernel's
    SIGXCPU and SIGKILL at the CPU limit included, so the payload must never be PID 1."""
    child = os.fork()
    if child == 0:
        return
    os.closerange(0, 65536)
    while True:
        pid, status = os.wait()
        if pid == child:
            os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def lock_down(*, mount_ns: bool, scratch_mb: int = 64, expose=(), memory_mb: int = 0, cpu_s: int = 0,
              file_mb: int = 0, nproc: int = 0, nofile: int = 256, uid: int = NOBODY) -> dict:
    """Apply the layers of the module docstring to this process; returns {layer: active}.

    `memory_mb` etc. of 0 leave that rlimit alone. Raises OSError when a mount fails (the caller
    must then not run anything: a half-built jail is no jail).
    """
    layers = {"netns+pidns+mountns": False, "uid": False, "rlimits": False, "seccomp": False}
    root = os.geteuid() == 0
    if mount_ns:
        _mount_jail(scratch_mb=scratch_mb, expose=expose, uid=uid)
        layers["netns+pidns+mountns"] = True
    if os.getpid() == 1:
        _become_reaper()
    mb = 1024 * 1024
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, nofile)]
    limits += [(resource.RLIMIT_AS, memory_mb * mb)] if memory_mb else []
    limits += [(resource.RLIMIT_CPU, cpu_s)] if cpu_s else []
    limits += [(resource.RLIMIT_FSIZE, file_mb * mb)] if file_mb else []
    limits += [(resource.RLIMIT_NPROC, nproc)] if nproc else []
    for which, value in limits:
        hard = value + 1 if which == resource.RLIMIT_CPU else value  # SIGXCPU first, SIGKILL at hard
        resource.setrlimit(which, (value, hard))
    layers["rlimits"] = bool(memory_mb or cpu_s or file_mb or nproc)
    if root:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    layers["uid"] = os.getuid() == uid and os.geteuid() == uid and os.getgid() == uid
    layers["seccomp"] = _install_seccomp()
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]
    return layers


_PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
                             "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
                             "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                             "sys._current_frames"})
_PATH_EVENTS = frozenset({"os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.symlink", "os.link",
                          "os.chmod", "os.chown", "os.truncate", "os.utime", "shutil.rmtree", "os.replace"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _make_hook(root, block_sockets, process_events=_PROCESS_EVENTS, path_events=_PATH_EVENTS,
               write_flags=_WRITE_FLAGS, realpath=os.path.realpath, join=os.path.join, fsdecode=os.fsdecode,
               sep=os.sep):
    """The audit hook; everything it reads is bound here, none of it through module globals."""
    def inside(path):
        if isinstance(path, int):
            return True  # an already-open descriptor was checked when it was opened
        if isinstance(path, bytes):
            path = fsdecode(path)
        real = realpath(join(root, str(path)))
        return real == root or real.startswith(root + sep)

    def hook(event, args):
        if event in process_events:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args[0] in ("ctypes", "_ctypes"):
            raise PermissionError("sandbox: importing ctypes is not allowed")
        if block_sockets and event.startswith("socket.") and event != "socket.getservbyname":
            raise PermissionError(f"sandbox: network access ({event}) is not allowed")
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags & write_flags)
            if writing and path is not None and not inside(path):
                raise PermissionError(f"sandbox: writing outside the working directory ({path!r})")
        elif event == "sqlite3.connect":  # creates its database file without an `open` event
            database = args[0] if args else None
            if database not in (None, "", ":memory:", b"", b":memory:") and not inside(database):
                raise PermissionError(f"sandbox: sqlite3 database outside the working directory ({database!r})")
        elif event in path_events:
            for arg in args[:2]:
                if isinstance(arg, (str, bytes)) and not inside(arg):
                    raise PermissionError(f"sandbox: {event} outside the working directory ({arg!r})")
    return hook


def _limit_of(err: BaseException) -> str | None:
    """Which limit a payload's exception shows: the name the sandbox reports as `limit`."""
    text = str(err)
    if isinstance(err, MemoryError):
        return "memory"
    if isinstance(err, RecursionError):
        return "recursion"
    if isinstance(err, RuntimeError) and "thread" in text:
        return "nproc"
    if isinstance(err, PermissionError) and text.startswith("sandbox:"):
        return "audit_hook"
    if isinstance(err, OSError) and err.errno == 27:  # EFBIG: RLIMIT_FSIZE (SIGXFSZ is ignored)
        return "file_size"
    if isinstance(err, OSError) and err.errno == 24:  # EMFILE
        return "nofile"
    if isinstance(err, OSError) and err.errno == 11:  # EAGAIN: RLIMIT_NPROC
        return "nproc"
    if isinstance(err, OSError) and err.errno in (1, 38):  # EPERM / ENOSYS: seccomp or the uid refused it
        return "permission"
    if isinstance(err, OSError) and err.errno == 30:  # EROFS: the read-only mount namespace
        return "read_only"
    return None


def main():
    import signal

    request = json.loads(sys.stdin.read())
    reply_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    lock = request["lock"]
    try:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write then fails with EFBIG
        layers = lock_down(**lock)
    except OSError as err:
        os.write(reply_fd, (json.dumps({"layers": None, "error": f"lock-down failed: {err}"}) + "\n").encode())
        os._exit(3)
    layers["audit_hook"] = request.get("audit_hook", True)
    os.write(reply_fd, (json.dumps({"layers": layers}) + "\n").encode())
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    root = os.path.realpath(os.getcwd())
    namespace = {"__name__": "__sandbox__", "__builtins__": __builtins__}
    code, entry_name, value = request["code"], request.get("entry", "transform"), request["input"]
    del request
    if layers["audit_hook"]:
        sys.addaudithook(_make_hook(root, not lock["mount_ns"]))
    limit = None
    try:
        exec(compile(code, "<model code>", "exec"), namespace)
        entry = namespace.get(entry_name)
        if not callable(entry):
            raise NameError(f"the code defines no function {entry_name!r}")
        reply = {"ok": True, "value": entry(value)}
        text = json.dumps(reply)
    except BaseException as err:  # noqa: BLE001 - any failure of the payload is its test's error
        limit = _limit_of(err)
        try:
            message = f"{type(err).__name__}: {err}"[:2000]
        except BaseException:  # noqa: BLE001 - e.g. a str() that itself hits a limit
            message = type(err).__name__
        text = json.dumps({"ok": False, "error": message, "limit": limit})
    os.write(reply_fd, text.encode())
    os._exit(0)


if __name__ == "__main__":
    main()
