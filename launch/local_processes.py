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
import time


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
    children, pumps = [], []
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
        pump = threading.Thread(target=_pump, args=(pid, child.stdout, sys.stdout), daemon=True)
        pump.start()
        children.append(child)
        pumps.append(pump)
    code = _wait_all(children, timeout_s=timeout_s)
    for pump in pumps:  # the children have exited: let their last lines out before the job's code is returned
        pump.join(timeout=10)
    return code


def _wait_all(children: list[subprocess.Popen], *, timeout_s: float | None) -> int:
    """Waits for every child; the first to fail (whichever process it is) stops the others at once.

    Waiting on the children in order would not do: a failed process 1 would sit in JAX's shutdown barrier while
    process 0 waits for it inside a collective, and the job would end only when that barrier times out (300 s),
    with the real error buried under the coordination service's messages.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    code = 0
    try:
        while None in [child.poll() for child in children]:  # a list, not any(): every child is polled
            failed = [(i, c.returncode) for i, c in enumerate(children) if c.returncode not in (None, 0)]
            if failed:
                pid, code = failed[0]
                print(f"[launch] process {pid} exited with {code}; stopping the others", file=sys.stderr, flush=True)
                break
            if deadline is not None and time.monotonic() > deadline:
                print(f"[launch] timed out after {timeout_s:g} s; stopping every process", file=sys.stderr, flush=True)
                return 124
            time.sleep(0.2)
        else:
            code = next((c.returncode for c in children if c.returncode != 0), 0)
    finally:
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
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
