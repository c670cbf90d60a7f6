"""Runs one command as N local processes of one JAX job (the multi-host code path, on one machine).

    python launch/local_processes.py --processes 2 --devices-per-process 4 -- reasoner train --config ...

Each process gets REASONER_COORDINATOR / REASONER_NUM_PROCESSES / REASONER_PROCESS_ID
(read by `reasoner.distributed.maybe_initialize`) and its own simulated CPU devices.
If one process fails, the others are terminated; the exit code is the first failure's.
Output lines are prefixed with the process id.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pump(pid: int, stream, sink) -> None:
    for line in iter(stream.readline, ""):
        sink.write(f"[{pid}] {line}")
        sink.flush()


def run(command: list[str], *, processes: int, devices_per_process: int, timeout_s: float | None = None) -> int:
    """Starts `processes` copies of `command` and waits for all; returns the job's exit code."""
    if processes < 1 or devices_per_process < 1:
        raise ValueError(f"processes={processes}, devices_per_process={devices_per_process}: both must be >= 1")
    port = _free_port()
    children = []
    for pid in range(processes):
        env = dict(os.environ)
        env.update(
            REASONER_COORDINATOR=f"127.0.0.1:{port}",
            REASONER_NUM_PROCESSES=str(processes),
            REASONER_PROCESS_ID=str(pid),
            JAX_PLATFORMS="cpu",
            # all processes share this host's cores: a busy one may miss JAX's 100 s heartbeat window
            REASONER_HEARTBEAT_TIMEOUT_S=os.environ.get("REASONER_HEARTBEAT_TIMEOUT_S", "900"),
            XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_per_process}",
        )
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=_pump, args=(pid, child.stdout, sys.stdout), daemon=True).start()
        children.append(child)
    code = 0
    try:
        for child in children:
            rc = child.wait(timeout=timeout_s)
            if rc != 0 and code == 0:
                code = rc
                for other in children:
                    if other.poll() is None:
                        other.terminate()
    except subprocess.TimeoutExpired:
        code = 124
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--devices-per-process", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=None, help="seconds before every process is killed")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command each process runs")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    return run(command, processes=args.processes, devices_per_process=args.devices_per_process, timeout_s=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
