"""Run self-contained SMT-LIB 2 scripts with Z3 and normalise what it prints (Sequent-Prover App. A.2).

Choice: Z3's Python API (`Z3_eval_smtlib2_string`, the same SMT-LIB front end as the `z3` binary)
inside a pool worker, not the `z3` executable. A per-call `z3` process costs a fork+exec and a
solver start (10-30 ms on a loaded 2-core host), which alone would spend the 20 ms overhead budget;
the pool worker already gives the process isolation the binary would (hard deadline, memory cap,
crash isolation). Two things the API needs that the binary gets for free are done here: every call
runs in a fresh `z3.Context`, and global parameters are reset before each call, because a script's
`(set-option :smt.arith.solver 6)` changes *global* parameters that would leak into later calls
(seen on the z3test sample: one script turned the next 40 verdicts into `unknown`).

Limits: `timeout_s` (default 30) is passed to Z3 as its soft per-`check-sat` timeout (the verdict
becomes `unknown`, reason "timeout"); the pool kills the worker at `timeout_s + HARD_GRACE_S` if Z3
does not yield (parser, tactics that ignore the timeout). `memory_mb` (default 256) is Z3's
`memory_max_size` and the pool's resident-memory cap; on a Z3 memout the worker is replaced, since
Z3 is not reliably usable after one.

Rule for several `check-sat` and for errors (documented contract, tested):
  * `verdicts` lists every check-sat verdict in order; `sat_result` is the LAST one (the verdict
    of the final check-sat, as the harness of the paper reads "the exit line of (check-sat)"),
    or None when the script printed no verdict. A verdict is what a check-sat (check-sat-assuming,
    check-sat-using, query) printed itself: a `(simplify sat)` of a constant named `sat`, or an error
    message quoting a symbol `|\nunsat|`, prints a line that reads the same and is not one. Where a command
    other than those prints such a line outside an error message, the call fails there ("refused while Z3 ran",
    the output kept up to that command), since curation reads the verdicts of a failed call from the output;
  * a check-sat that gives up on the timeout ENDS the script, as `(exit)` would: nothing after it runs,
    its `unknown` is the last verdict and the call fails with a "timeout" error. Z3 itself would read on,
    and a `(reset)` (or `(reset-assertions)`, or a `(pop)` and an `(assert false)`) then a check-sat would
    print a later, real verdict that stood in for the timeout, while the obligation was never decided; the
    pool's hard deadline also counts the whole script, not each check-sat;
  * `error` is the first `(error "...")` message Z3 printed, wherever it occurs; `success` is True
    only when there was no error, no timeout and no memout. An error after a verdict therefore keeps
    the verdict in `sat_result` but makes `success` False: the script as written is broken;
  * `(exit)` stops the script: commands after it are not run and print nothing;
  * `model` is the text of the last `(get-model)` answer, or None.
A line that is exactly `sat`, `unsat` or `unknown` is read as a verdict, so `(echo "sat")` would be
misread; the rule is kept simple because agents' scripts use echo for labels, not bare verdicts.

Overlapping verification with device work:

    with Z3Runner(workers=2) as z3:
        futures = [z3.submit(code) for code in scripts_of_last_batch]  # returns at once
        state, metrics = train_step(state, batch, rng)                  # the device works meanwhile
        results = [f.result() for f in futures]                         # Z3Result each
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import re
import time

VERDICTS = ("sat", "unsat", "unknown")
HARD_GRACE_S = 0.5
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MEMORY_MB = 256
MAX_OUTPUT_CHARS = 65536  # of a call's output and model kept in its result (the model sees 4,000 of them)
_ERROR = re.compile(r'\(error "((?:[^"]|"")*)"\)', re.DOTALL)
_REASON = re.compile(r':reason-unknown\s+"([^"]*)"')
_POSITION = re.compile(r'(^\(error "line |^; .*line: )(\d+)( column |,? position: )(\d+)', re.MULTILINE)
TIMEOUT_REASONS = ("timeout", "canceled")
_ASK_REASON = "(get-info :reason-unknown)"
# Z3's own out-of-memory errors are the whole message (after a position): an unknown constant named `memout`
# ("unknown constant memout") must not read as one, or a script could have its worker killed on every call
_MEMOUT_TEXT = re.compile(r"\s*(?:line \d+ column \d+: )?(?:out of memory|max\. memory exceeded|memout)\s*",
                          re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Z3Result:
    """The normalised outcome of one script; `to_dict()` is the tool observation payload."""

    success: bool
    output: str
    sat_result: str | None
    error: str | None
    model: str | None
    elapsed_s: float
    verdicts: tuple[str, ...] = ()
    reason_unknown: str | None = None

    @property
    def real_verdict(self) -> bool:
        """A usable sat/unsat answer: no error, no timeout, and the last verdict is sat or unsat."""
        return self.success and self.sat_result in ("sat", "unsat")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"verdicts": list(self.verdicts)}


def verdict_lines(output: str) -> list[str]:
    """The verdicts in Z3's printed output, in order: the lines that are only sat, unsat or unknown."""
    return [line.strip() for line in output.splitlines() if line.strip() in VERDICTS]


def parse_output(output: str, *, elapsed_s: float, reason_unknown: str | None = None,
                 verdicts: tuple[str, ...] | None = None) -> Z3Result:
    """Turn Z3's printed output into a Z3Result following the module's rule. `verdicts` are what the script's
    check-sat commands answered (`run_script` knows them); without them they are read from the output's lines."""
    from reasoner.verifiers.smtlib import top_level_spans

    verdicts = tuple(verdict_lines(output)) if verdicts is None else tuple(verdicts)
    errors = [m.group(1).replace('""', '"') for m in _ERROR.finditer(output)]
    models = [b for b in (output[a:e] for a, e in top_level_spans(output, code=False))
              if not b.startswith("(error") and ("define-fun" in b or b.startswith("(model") or b == "()")]
    timed_out = bool(verdicts) and verdicts[-1] == "unknown" and reason_unknown in TIMEOUT_REASONS
    error = errors[0] if errors else (f"timeout: Z3 gave up ({reason_unknown})" if timed_out else None)
    return Z3Result(success=error is None, output=output, sat_result=verdicts[-1] if verdicts else None,
                    error=error, model=models[-1] if models else None, elapsed_s=elapsed_s,
                    verdicts=verdicts, reason_unknown=reason_unknown)


def refused_result(smt_code: str) -> Z3Result | None:
    """The error result for a script that would touch a file (see `smtlib.file_access`), start threads
    (`smtlib.thread_starts`: the pool budgets a call one thread of CPU and memory), exit the process at an error
    (`smtlib.exiting_options`), holds a lone surrogate (not UTF-8: Z3's API raised), echo a verdict word
    (`smtlib.echoed_verdicts`: read as a check-sat's answer) or holds a NUL character (Z3 takes a C string and
    would stop reading there, while curation grades the whole text), else None."""
    from reasoner.verifiers.smtlib import echoed_verdicts, exiting_options, file_access, thread_starts

    forged = echoed_verdicts(smt_code)
    if forged:
        return _refused(f"{forged[0]} would print a verdict no check-sat gave; scripts may not echo sat, unsat or "
                        "unknown")
    if "\x00" in smt_code:
        return _refused(f"a NUL character at offset {smt_code.index(chr(0))} would end the script for Z3; expected "
                        "text without NUL")
    try:
        smt_code.encode("utf-8")
    except UnicodeEncodeError as err:  # a lone surrogate, as json.loads makes of "\ud800": Z3's API raised on it
        return _refused(f"the character {smt_code[err.start]!r} at offset {err.start} is not text UTF-8 can encode "
                        "(a lone surrogate); expected text")
    names = file_access(smt_code)
    if names:
        return _refused(f"{', '.join(names)} would make Z3 read or write a file; scripts may not touch files")
    names = exiting_options(smt_code)
    if names:
        return _refused(f"{', '.join(names)} would make Z3 exit the process at the first error; expected "
                        ":error-behavior continued-execution or none")
    names = thread_starts(smt_code)
    if names:
        return _refused(f"{', '.join(names)} would make Z3 start threads, and a call is budgeted one CPU; scripts "
                        "may not run Z3 in parallel")
    return None


def _refused(reason: str) -> Z3Result:
    return Z3Result(success=False, output="", sat_result=None, model=None, elapsed_s=0.0,
                    error=f"refused before Z3 ran: {reason}")


def is_memout(output: str, reason_unknown: str | None) -> bool:
    """Whether Z3 ran out of memory, whatever the script printed after it (e.g. a `(get-model)`
    error after the `unknown`): Z3's own reason, or its out-of-memory messages in the output."""
    reason = (reason_unknown or "").lower()
    return "memout" in reason or "memory" in reason or _memout_error(output)


def _memout_error(output: str) -> bool:
    """An `(error "...")` of Z3 saying it ran out of memory (an `echo` of the words does not count)."""
    return any(_MEMOUT_TEXT.fullmatch(m.group(1)) for m in _ERROR.finditer(output))


def run_script(smt_code: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
               memory_mb: int = DEFAULT_MEMORY_MB) -> Z3Result:
    """Run one script in this process (a pool worker, or the benchmark's bare baseline).

    A script that would touch a file gets the refused result without reaching Z3. The script runs piece by piece
    in one context (`smtlib.verdict_pieces`: each check-sat alone), which Z3 prints exactly as it prints the whole
    (error positions are shifted back to the script's own lines and columns), so that the reason of every
    `unknown` is read right after its check-sat. A check-sat that gives up on the timeout ends the script, as
    `(exit)` would (see the module's rule). Raises MemoryError when Z3 ran out of memory anywhere in the script,
    so that a pool replaces the worker (Z3 is not reliably usable after a memout). `memory_mb` is Z3's absolute
    `memory_max_size`, the same for every call whatever the worker ran before.
    """
    if not isinstance(smt_code, str):
        raise TypeError(f"smt_code must be str, got {type(smt_code).__name__}")
    refused = refused_result(smt_code)
    if refused is not None:
        return refused
    import z3

    from reasoner.verifiers.smtlib import verdict_pieces

    start = time.perf_counter()
    z3.Z3_global_param_reset_all()
    z3.set_param("timeout", max(1, int(timeout_s * 1000)))
    z3.set_param("memory_max_size", int(memory_mb))
    context = z3.Context()  # must stay referenced while Z3 runs: ref() alone does not keep it alive
    printed, verdicts, reason, where = [], [], None, _Position()
    for begin, end, command in verdict_pieces(smt_code):
        piece = smt_code[begin:end]
        output = where.shift(_evaluate(z3, context, piece), piece)
        if command is None and (forged := verdict_lines(_ERROR.sub("", output))):
            return _capped(_forged(forged[0], "".join(printed), verdicts, elapsed_s=time.perf_counter() - start))
        printed.append(output)
        said = output.split("\n", 1)[0].strip() if command else None
        if said in VERDICTS:
            verdicts.append(said)
            reason = _reason_unknown(z3, context, where) if said == "unknown" else None
        if is_memout(output, reason if said == "unknown" else None):
            raise MemoryError(f"Z3 exceeded its memory cap of {memory_mb} MB ({reason or 'out of memory'})")
        if said == "unknown" and reason in TIMEOUT_REASONS:
            break  # a timeout ends the script: a later (reset) and check-sat must not stand in for it
    return _capped(parse_output("".join(printed), elapsed_s=time.perf_counter() - start, reason_unknown=reason,
                                verdicts=tuple(verdicts)))


def _forged(line: str, output: str, verdicts: list[str], *, elapsed_s: float) -> Z3Result:
    """The failed result of a script whose command other than a check-sat printed a line that reads as a verdict
    (`(simplify sat)` of a constant named `sat`): its output stops before that command, since curation reads the
    verdicts of a failed call from the output's lines."""
    return Z3Result(success=False, output=output, sat_result=verdicts[-1] if verdicts else None, model=None,
                    elapsed_s=elapsed_s, verdicts=tuple(verdicts),
                    error=f"refused while Z3 ran: a command other than check-sat printed the line {line!r}, which "
                          "reads as a verdict; name symbols otherwise than sat, unsat and unknown")


def _evaluate(z3, context, smt_code: str) -> str:
    """What Z3 prints for `smt_code` in `context` (its state carries over from the previous pieces)."""
    try:
        return z3.Z3_eval_smtlib2_string(context.ref(), smt_code)
    except z3.Z3Exception as err:
        # The API raises when an (error ...) was printed; the message is the full output.
        return err.value.decode("utf-8", "replace") if isinstance(err.value, bytes) else str(err.value)


def _reason_unknown(z3, context, where: _Position) -> str | None:
    """Z3's reason for its most recent `unknown` ("timeout", "canceled", "memout", "incomplete ...")."""
    where.asked(_ASK_REASON)
    try:
        match = _REASON.search(z3.Z3_eval_smtlib2_string(context.ref(), _ASK_REASON))
    except z3.Z3Exception:
        return None
    return match.group(1) if match else None


class _Position:
    """Z3 keeps counting lines and columns from one evaluation in a context to the next, so the positions it
    prints for a piece are the script's own but for the columns it counted past each evaluation's end (one) and
    for a `(get-info :reason-unknown)` asked in between (its length and one), on the line where the piece starts:
    `shift` takes them back off, so that the output is what Z3 prints for the whole script."""

    def __init__(self):
        self.line, self.extra = 1, 0

    def shift(self, output: str, piece: str) -> str:
        """`output`, printed for `piece` (the next one), with the extra columns taken off its piece's first line."""
        line, extra = self.line, self.extra
        if extra and "line" in output:
            def moved(match: re.Match) -> str:
                column = int(match.group(4)) - (extra if int(match.group(2)) == line else 0)
                return f"{match.group(1)}{match.group(2)}{match.group(3)}{column}"

            output = _POSITION.sub(moved, output)
        newlines = piece.count("\n")
        self.line += newlines
        self.extra = (extra if not newlines else 0) + 1
        return output

    def asked(self, query: str) -> None:
        """Z3 evaluated `query` (one line) between two pieces."""
        self.extra += len(query.encode()) + 1


def _capped(result: Z3Result) -> Z3Result:
    """`result` with its output and model cut to MAX_OUTPUT_CHARS each (verdicts are read before the cut): an
    822-character script doubling a string 18 times printed 4 MB, kept in every rollout record."""
    cut = {}
    for name in ("output", "model"):
        text = getattr(result, name)
        if text is not None and len(text) > MAX_OUTPUT_CHARS:
            cut[name] = text[:MAX_OUTPUT_CHARS] + f"\n... [truncated: {len(text)} characters]"
    return dataclasses.replace(result, **cut) if cut else result


def failure_result(outcome: str, error: str | None, *, elapsed_s: float) -> Z3Result:
    """The Z3Result for a call the pool had to stop (timeout, memory, crash) or that raised."""
    return Z3Result(success=False, output="", sat_result="unknown" if outcome == "timeout" else None,
                    error=f"{outcome}: {error}", model=None, elapsed_s=elapsed_s)


class Z3Runner:
    """Z3 through a `VerifierPool`: `solve(code)` blocks, `submit(code)` returns a Future[Z3Result].

    Owns a pool of `workers` processes unless one is passed in (then the caller closes it); its
    workers are jailed like the code sandbox where `unshare` works (`isolate="auto"`; "strict"
    refuses to start without the jail, "off" runs them unjailed). Scripts that would touch files
    or start threads are refused in any case (`refused_result`).
    """

    TARGET = "reasoner.verifiers.z3_runner:run_script"

    def __init__(self, pool=None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 memory_mb: int = DEFAULT_MEMORY_MB, workers: int = 2, isolate: str = "auto"):
        from reasoner.verifiers.pool import VerifierPool

        for name, value in (("timeout_s", timeout_s), ("memory_mb", memory_mb), ("workers", workers)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"Z3Runner {name} must be a positive number, got {value!r}")
        self.timeout_s, self.memory_mb = float(timeout_s), int(memory_mb)
        self._owns_pool = pool is None
        self.pool = pool or VerifierPool(workers=workers, deadline_s=timeout_s + HARD_GRACE_S,
                                         memory_mb=memory_mb, isolate=isolate)

    def submit(self, smt_code: str, *, timeout_s: float | None = None) -> concurrent.futures.Future:
        timeout_s = float(timeout_s or self.timeout_s)
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError(f"Z3 timeout_s={timeout_s!r}: expected a finite number of seconds > 0")
        inner = self.pool.submit(self.TARGET, smt_code,
                                 task_kwargs={"timeout_s": timeout_s, "memory_mb": self.memory_mb},
                                 deadline_s=timeout_s + HARD_GRACE_S, memory_mb=self.memory_mb)
        outer: concurrent.futures.Future = concurrent.futures.Future()

        def convert(done: concurrent.futures.Future) -> None:
            result = done.result()
            if result.ok:
                outer.set_result(result.value)
            else:
                outer.set_result(failure_result(result.outcome, result.error, elapsed_s=result.elapsed_s))

        inner.add_done_callback(convert)
        return outer

    def solve(self, smt_code: str, *, timeout_s: float | None = None) -> Z3Result:
        return self.submit(smt_code, timeout_s=timeout_s).result()

    def solve_batch(self, scripts: list[str]) -> list[Z3Result]:
        return [f.result() for f in [self.submit(s) for s in scripts]]

    def close(self) -> None:
        if self._owns_pool:
            self.pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
