"""SMT-LIB 2 structure without a solver: S-expression parsing, comment stripping, declared symbols,
triviality, and grammar-production counts for the structural divergence of Sequent-Prover App. D.4.

The parser follows the SMT-LIB 2.6 lexical rules that matter for agents' scripts: `;` comments to
end of line, `"..."` string literals with `""` as the escaped quote, `|...|` quoted symbols,
keywords `:name`, numerals/decimals/#x/#b literals, and parentheses.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re


class SmtParseError(ValueError):
    """The text is not a sequence of balanced S-expressions."""


@dataclasses.dataclass(frozen=True)
class Atom:
    text: str
    kind: str  # "symbol", "keyword", "numeral", "decimal", "hex", "binary", "string"


_TOKEN = re.compile(r"""
    (?P<ws>\s+) | (?P<comment>;[^\n]*) | (?P<open>\() | (?P<close>\)) |
    (?P<string>"[^"]*(?:""[^"]*)*") | (?P<quoted>\|[^|]*\|) | (?P<keyword>:[^\s()";|]+) |
    (?P<hex>\#x[0-9a-fA-F]+) | (?P<binary>\#b[01]+) | (?P<decimal>\d+\.\d+) | (?P<numeral>\d+) |
    (?P<symbol>[^\s()";|]+)
""", re.VERBOSE)

COMMANDS = {
    "assert", "check-sat", "check-sat-assuming", "declare-const", "declare-fun", "declare-sort",
    "define-fun", "define-fun-rec", "define-funs-rec", "define-sort", "declare-datatype",
    "declare-datatypes", "echo", "exit", "get-assertions", "get-assignment", "get-info", "get-model",
    "get-option", "get-proof", "get-unsat-assumptions", "get-unsat-core", "get-value", "pop", "push",
    "reset", "reset-assertions", "set-info", "set-logic", "set-option", "check-sat-using", "simplify",
    "eval", "minimize", "maximize", "get-objectives",
}
BUILTINS = {
    "true", "false", "not", "and", "or", "xor", "=>", "=", "distinct", "ite", "forall", "exists",
    "let", "!", "_", "as", "match", "par", "Bool", "Int", "Real", "String", "Array", "BitVec",
    "+", "-", "*", "/", "div", "mod", "abs", "<", "<=", ">", ">=", "to_real", "to_int", "is_int",
    "select", "store", "const", "concat", "extract", "bvadd", "bvsub", "bvmul", "bvand", "bvor",
    "bvnot", "bvneg", "bvult", "bvule", "bvugt", "bvuge", "bvslt", "bvsle", "bvsgt", "bvsge",
    "str.++", "str.len", "str.at", "str.substr", "str.contains", "str.prefixof", "str.suffixof",
    "str.indexof", "str.replace", "str.to_int", "str.from_int", "Seq", "seq.unit", "seq.len",
    "FloatingPoint", "RoundingMode", "fp", "Float32", "Float64", "RNE", "RTZ",
}
DECLARING = {"declare-const", "declare-fun", "define-fun", "define-fun-rec", "declare-sort",
             "define-sort"}


def tokenize(text: str, *, keep_comments: bool = False) -> list[tuple[str, str]]:
    """(kind, text) tokens; whitespace dropped, comments dropped unless `keep_comments`."""
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise SmtParseError(f"unterminated string or quoted symbol at offset {pos}: {text[pos:pos + 30]!r}")
        kind = match.lastgroup
        if kind != "ws" and (kind != "comment" or keep_comments):
            tokens.append((kind, match.group()))
        pos = match.end()
    return tokens


def top_level_spans(text: str, *, code: bool) -> list[tuple[int, int]]:
    """(start, end) of each balanced parenthesised block at depth 0, in linear time and never raising. String
    literals and `;` comments are skipped inside blocks, and also between them when `text` is code; in prose (a
    model's step, Z3's printed output) a quote or a semicolon between blocks is punctuation."""
    spans, depth, start, i, n = [], 0, 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "\";" and (depth or code):
            close = text.find('"' if ch == '"' else "\n", i + 1)
            i = n if close < 0 else close + 1
            continue
        if ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
        i += 1
    return spans


def strip_comments(text: str) -> str:
    """The script with `;` comments removed; layout, strings and quoted symbols left intact."""
    kept, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise SmtParseError(f"unterminated string or quoted symbol at offset {pos}: {text[pos:pos + 30]!r}")
        if match.lastgroup != "comment":
            kept.append(match.group())
        pos = match.end()
    return "".join(kept)


def parse(text: str) -> list:
    """Top-level S-expressions as nested lists of Atom; raises SmtParseError when unbalanced."""
    stack: list[list] = [[]]
    for kind, tok in tokenize(text):
        if kind == "open":
            stack.append([])
        elif kind == "close":
            if len(stack) == 1:
                raise SmtParseError("unbalanced ')' in SMT-LIB text")
            done = stack.pop()
            stack[-1].append(done)
        else:
            atom_kind = "symbol" if kind == "quoted" else kind
            text_ = tok[1:-1] if kind == "quoted" else tok
            stack[-1].append(Atom(text_, atom_kind))
    if len(stack) != 1:
        raise SmtParseError(f"{len(stack) - 1} unclosed '(' in SMT-LIB text")
    return stack[0]


def _head(node) -> str | None:
    return node[0].text if isinstance(node, list) and node and isinstance(node[0], Atom) else None


def declared_symbols(commands: list) -> set[str]:
    """Names the script itself declares: constants, functions, sorts, datatype constructors/selectors."""
    names: set[str] = set()
    for cmd in commands:
        head = _head(cmd)
        if head in DECLARING and len(cmd) > 1 and isinstance(cmd[1], Atom):
            names.add(cmd[1].text)
        elif head in ("declare-datatypes", "declare-datatype"):
            names.update(a.text for a in _atoms(cmd[1:]) if a.kind == "symbol" and a.text not in BUILTINS)
        elif head == "define-funs-rec" and len(cmd) > 1 and isinstance(cmd[1], list):
            names.update(d[0].text for d in cmd[1] if isinstance(d, list) and d and isinstance(d[0], Atom))
    return names


def _atoms(node):
    """Every Atom under `node`, depth first, with an explicit stack (nesting 100k deep is fine)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Atom):
            yield item
        else:
            stack.extend(reversed(item))


def is_trivial(smt_code: str) -> bool:
    """Triviality (left undefined by Sequent-Prover §B.3.2; this is our precise definition).

    A script is trivial iff it parses and (a) it has no `check-sat` / `check-sat-assuming` /
    `check-sat-using` command, or (b) no `assert` command's term mentions a symbol the script
    declares itself (declare-const, declare-fun, define-fun(-rec), declare-sort, define-sort,
    datatype constructors and selectors). Bound variables of `forall`/`exists`/`let` are not
    declarations, so `(assert (forall ((x Int)) (> (+ x 1) x)))` alone is trivial: it asserts
    nothing about the problem's vocabulary. Unparseable scripts are not classified here (they are
    errors, counted separately): this returns False for them. The test is syntactic; a tautology
    over declared symbols such as `(assert (or p (not p)))` is not detected.
    """
    try:
        commands = parse(smt_code)
    except SmtParseError:
        return False
    heads = [_head(c) for c in commands]
    if not any(h in ("check-sat", "check-sat-assuming", "check-sat-using") for h in heads):
        return True
    declared = declared_symbols(commands)
    for cmd in commands:
        if _head(cmd) == "assert" and any(a.text in declared for a in _atoms(cmd[1:])):
            return False
    return True


def _category(node) -> str:
    """Grammar symbol of a node: reserved words stay themselves, identifiers collapse to ID."""
    if isinstance(node, Atom):
        if node.kind == "symbol":
            return node.text if node.text in COMMANDS or node.text in BUILTINS else "ID"
        if node.kind == "keyword":
            return node.text
        return node.kind.upper()
    head = _head(node)
    if head is None:
        return "(LIST)" if node else "()"
    return f"({_category(node[0])})"  # node[0] is an Atom here: no recursion into lists


def production_counts(smt_code: str) -> collections.Counter:
    """Counts of productions `(head) -> child symbols` over every list node of the parse.

    Comments are dropped by the lexer and all identifiers are one class (`ID`), so the counts are
    invariant to comments and renaming but see declarations, quantifiers, operators and nesting.
    """
    counts: collections.Counter = collections.Counter()
    stack = list(reversed(parse(smt_code)))
    while stack:  # explicit stack: no recursion limit at any nesting depth
        node = stack.pop()
        if isinstance(node, Atom):
            continue
        counts[f"{_category(node)} -> {' '.join(_category(c) for c in node)}"] += 1
        stack.extend(reversed(node))
    return counts


def js_divergence(p_counts: collections.Counter, q_counts: collections.Counter) -> float:
    """Jensen-Shannon divergence in bits (base 2, in [0, 1]) between two count distributions."""
    p_total, q_total = sum(p_counts.values()), sum(q_counts.values())
    if p_total == 0 or q_total == 0:
        raise ValueError("js_divergence needs two non-empty count distributions")
    jsd = 0.0
    for key in set(p_counts) | set(q_counts):
        p, q = p_counts.get(key, 0) / p_total, q_counts.get(key, 0) / q_total
        m = 0.5 * (p + q)
        if p > 0:
            jsd += 0.5 * p * math.log2(p / m)
        if q > 0:
            jsd += 0.5 * q * math.log2(q / m)
    return max(0.0, min(1.0, jsd))


# Z3 parameters that name, write or read a file (from `z3 -pd` of z3-solver 5.4.1: every option whose
# description mentions a file, a path, a log, a dump to files or an output channel), as module.name;
# the bare name is refused too, since Z3 also resolves some options without their module.
FILE_OPTIONS = frozenset({
    "regular_output_channel", "diagnostic_output_channel", "dot_proof_file", "trace", "trace_file_name",
    "sat.drat.file", "sat.inprocess.out", "tptp.dump_smt2", "tptp.root", "solver.axioms2files",
    "solver.cancel_backup_file", "solver.proof.log", "solver.smtlib2_log", "opt.dump_benchmarks",
    "opt.solution_prefix", "nlsat.known_sat_assignment_file_name", "nlsat.log_lemma_smtrat",
    "nlsat.log_lemmas", "fp.print_aig", "fp.spacer.trace_file", "fp.spacer.dump_benchmarks",
    "smt.arith.dump_bound_lemmas", "smt.arith.dump_lemmas", "smt.arith.nl.log",
})
_FILE_OPTION_NAMES = FILE_OPTIONS | {name.split(".", 1)[1] for name in FILE_OPTIONS if "." in name}
FILE_COMMANDS = frozenset({"include"})


def _code_tokens(smt_code: str):
    """(kind, text) of the script's tokens but whitespace and comments, left to right, up to the end or to text
    Z3 would read as inside an unterminated string or quoted symbol. Never raises."""
    pos = 0
    while pos < len(smt_code):
        match = _TOKEN.match(smt_code, pos)
        if match is None:
            return
        pos = match.end()
        if match.lastgroup not in ("ws", "comment"):
            yield match.lastgroup, match.group()


def file_access(smt_code: str) -> list[str]:
    """The options (as written, e.g. ":regular-output-channel") and commands ("include") of a script
    that would make Z3 touch a file, in order of first appearance; [] for a script that touches none.

    Every keyword token anywhere in the script is checked, so a parameter given through
    `set-option`, `using-params`, `check-sat-using` or a tactic's attributes is seen the same way;
    names are compared as Z3 does (case-insensitive, `-` equal to `_`); a command counts quoted too
    (`(|include| ...)`), and so does any quoted symbol holding a backslash, which Z3 rejects and recovers from
    by reading on where this scan cannot follow. One linear scan; text after an unterminated string is inside
    that string for Z3 too (Z3 reads a backslash in a string literally, as this scanner does), so it is not
    scanned. Never raises.
    """
    found: list[str] = []
    depth, after_open = 0, False
    for kind, text in _code_tokens(smt_code):
        if kind == "keyword" and text[1:].lower().replace("-", "_") in _FILE_OPTION_NAMES:
            found.append(text)
        elif kind in ("symbol", "quoted") and after_open and depth == 1 and text.strip("|") in FILE_COMMANDS:
            found.append(text)
        elif kind == "quoted" and "\\" in text:
            # Z3 rejects a backslash inside |...| and recovers by reading on from a place this scanner cannot
            # follow ((set-info :source |a\| |) hid a set-option from it): fail closed
            found.append(text)
        depth += 1 if kind == "open" else -1 if kind == "close" and depth else 0
        after_open = kind == "open"
    return list(dict.fromkeys(found))


# Z3 parameters and tactics that start threads (from `z3 -pd` and `z3.tactics()` of z3-solver 5.4.1, each seen to
# raise the thread count of a check-sat but `smt.sls.enable`, documented as a co-processor "in parallel", and
# `parallel.threads.max` / `parallel.num_bb_threads`, which size the parallel solver): a pool worker is one process
# whose CPU and memory are budgeted for one thread. Refused whatever their value, as the file options are.
THREAD_OPTIONS = frozenset({
    "parallel.enable", "parallel.threads.max", "parallel.num_bb_threads", "smt.threads", "sat.threads",
    "sat.local_search_threads", "sat.ddfw.threads", "smt.sls.enable",
})
_THREAD_OPTION_NAMES = THREAD_OPTIONS | {name.split(".", 1)[1] for name in THREAD_OPTIONS}
THREAD_TACTICS = frozenset({"par-or", "par-then", "psat", "psmt", "pqffd"})


def thread_starts(smt_code: str) -> list[str]:
    """The options (as written, e.g. ":parallel.enable") and parallel tactics ("par-or", "psat", ...) of a script
    that would make Z3 start threads, in order of first appearance; [] for a script that starts none.

    Every keyword anywhere is checked, as in `file_access` (set-option, using-params and tactic attributes alike:
    `(using-params smt :threads 4)` runs four); names compare as Z3 compares them (case-insensitive, `-` equal to
    `_`), with or without their module. A parallel tactic counts wherever its name stands, quoted too: a
    constant of that name is refused as well, which costs a rename. Same linear scan; never raises.
    """
    found: list[str] = []
    for kind, text in _code_tokens(smt_code):
        if kind == "keyword" and text[1:].lower().replace("-", "_") in _THREAD_OPTION_NAMES:
            found.append(text)
        elif kind in ("symbol", "quoted") and text.strip("|") in THREAD_TACTICS:
            found.append(text)
    return list(dict.fromkeys(found))


def exiting_options(smt_code: str) -> list[str]:
    """The `:error-behavior` settings other than `continued-execution` (as written, e.g.
    ":error-behavior immediate-exit"): with `immediate-exit`, Z3 calls exit() at the script's first error, which
    ends the pool worker (a crash, and a restart) or the caller's own process where `run_script` runs in it
    (`entailment` without a runner). Fail closed: any other value counts. Same linear scan; never raises."""
    found: list[str] = []
    option = None
    for kind, text in _code_tokens(smt_code):
        if option is not None and text.strip("|") != "continued-execution":
            found.append(f"{option} {text}")
        option = text if kind == "keyword" and text == ":error-behavior" else None
    return list(dict.fromkeys(found))


def echoed_verdicts(smt_code: str) -> list[str]:
    """The `(echo "...")` commands whose text prints a line that reads as a verdict (sat, unsat, unknown): Z3
    prints it as if a check-sat had answered, so an echoed "unsat" before an error forged solver evidence. Same
    linear scan as `file_access`; never raises."""
    found: list[str] = []
    after_echo, after_open = False, False
    for kind, text in _code_tokens(smt_code):
        if after_echo and kind == "string":
            lines = text[1:-1].replace('""', '"').splitlines()
            if any(line.strip().lower() in ("sat", "unsat", "unknown") for line in lines):
                found.append(f"(echo {text})")
        after_echo = after_open and kind == "symbol" and text == "echo"
        after_open = kind == "open"
    return found


VERDICT_COMMANDS = frozenset({"check-sat", "check-sat-assuming", "check-sat-using", "query"})


def verdict_pieces(smt_code: str) -> list[tuple[int, int, str | None]]:
    """The script cut into consecutive pieces (start, end, command) that `z3_runner.run_script` runs one after the
    other in one context: each top-level command that prints a verdict (`VERDICT_COMMANDS`, quoted too, as Z3
    reads `(|check-sat|)`) is a piece of its own, named by `command`; the text between them is a piece with
    command None. Why: Z3 answers `(get-info :reason-unknown)` only for its most recent check-sat, so the runner
    asks after each one, and it reads verdicts only from what those commands printed (a `(simplify sat)` of a
    constant named `sat` prints the same line).

    The pieces join to the whole script, except that they end with a top-level `(exit)`, after which Z3 reads
    nothing (`(exit 1)` is an error Z3 reads on after). Same tokens as `file_access`: text after an unterminated
    string or quoted symbol is inside it for Z3 too, so it is one last piece. A `)` with no `(` is left where it
    is (Z3 reports it and reads on). Linear; never raises.
    """
    pieces: list[tuple[int, int, str | None]] = []
    cut, depth, start, head, pos, extra = 0, 0, 0, None, 0, 0
    while pos < len(smt_code):
        match = _TOKEN.match(smt_code, pos)
        if match is None:
            break
        kind, pos = match.lastgroup, match.end()
        if kind in ("ws", "comment"):
            continue
        if depth and head is not None and not (kind == "close" and depth == 1):
            extra += 1  # a token after the command's head: `(exit 1)` is an error Z3 reads on after
        if kind == "open":
            if depth == 0:
                start, head, extra = match.start(), None, 0
            elif depth == 1 and head is None:
                head = ""  # the command's head is a list: no command name
            depth += 1
        elif kind == "close" and depth:
            depth -= 1
            if depth == 0 and head in VERDICT_COMMANDS:
                if start > cut:
                    pieces.append((cut, start, None))
                pieces.append((start, pos, head))
                cut = pos
            elif depth == 0 and head == "exit" and not extra:
                pieces.append((cut, pos, None))
                return pieces
        elif depth == 1 and head is None:
            head = match.group().strip("|") if kind in ("symbol", "quoted") else ""
    if cut < len(smt_code):
        pieces.append((cut, len(smt_code), None))
    return pieces
