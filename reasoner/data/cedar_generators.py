"""Our own Crypto and ListFunction tasks, in the exact record formats of the staged Robust-Rule-Induction files.

    rows = crypto_records("caesar", n=20, seed=0)          # like ../shared/data/crypto/caesar.jsonl lines
    rows = list_function_records(n=20, seed=0)              # like ../shared/data/list_functions/list_functions.jsonl

Why: the staged files hold 60 + 60 cipher tasks and 150 list functions; CEDAR's mixture draws 160 + 40 from them,
so generated tasks add rule-induction rows without reusing (or overfitting to) the benchmark's own records.

Crypto record: {"train": {"normal": [io] * n_train, "ood": [io] * n_ood, "noise": [io] * n_noise},
"test": [io] * n_test, "index": int}, io = {"input": str, "output": str}; as in the staged files (10 / 5 / 5 / 10):
  normal, test  pseudo-words (consonant-vowel syllables, 4-10 letters, about 1 in 6 capitalised), enciphered;
  ood           uniformly random letters (no word structure), enciphered;
  noise         pseudo-words whose enciphered output has 1 to len characters replaced by other letters of the same
                case: every noise pair disagrees with the cipher (the staged files' noise pairs all do, too).
  caesar shifts each letter by k (case kept), k drawn from `shifts` (the staged files use 1-5); atbash maps
  a<->z, b<->y, ... (case kept). Inputs are distinct within a record.
ListFunction record: {"id": "gNNN", "function": "def gNNN(x):\\n    # comment\\n    return expr\\n", "train":
{"normal": [io] * 10, "ood": [], "noise": [io] * 5}, "test": [io] * 10}, io = {"input": list[int], "output":
list[int]}; inputs are 3-8 ints in [0, 99] (the staged inputs are mostly 3-7 ints below 100). `ROUTINES` are the
hidden rules (some with a drawn parameter k); noise pairs change one or two output values (or append one value to
an empty output), so each disagrees with the rule. A record's routine is drawn uniformly; a drawn instance whose
outputs are all equal (e.g. a filter that empties every list) is redrawn, so the examples determine the rule.

Both are seeded (`random.Random(seed)`): the same arguments give the same records on any machine. The records are
read by `reasoner.tasks.cedar_verify.load_records` and scored by its Table 8 verifier like the staged ones;
`reasoner.data.cedar_mixture` adds them to the training split with `MixtureSpec.generated_*`.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import string
from collections.abc import Callable

CIPHERS = ("caesar", "atbash")
_LOWER, _UPPER = string.ascii_lowercase, string.ascii_uppercase
_CONSONANTS, _VOWELS = "bcdfghjklmnprstvwyz", "aeiou"


@dataclasses.dataclass(frozen=True)
class Counts:
    """Input/output pairs per generated record; the defaults are the staged files' numbers."""

    normal: int = 10
    """`train.normal` pairs: inputs like the test inputs, outputs by the rule (>= 1)."""
    ood: int = 5
    """`train.ood` pairs: out-of-distribution inputs (Crypto: random letters); 0 for list functions."""
    noise: int = 5
    """`train.noise` pairs: outputs changed so that each disagrees with the rule."""
    test: int = 10
    """`test` pairs, the held-out ones the verifier scores (>= 1)."""

    def __post_init__(self):
        for name in ("normal", "ood", "noise", "test"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"generator count {name}={getattr(self, name)!r}: expected an int >= 0")
        if self.normal < 1 or self.test < 1:
            raise ValueError(f"generator counts normal={self.normal}, test={self.test}: expected both >= 1")


CRYPTO_COUNTS = Counts()
LIST_COUNTS = Counts(ood=0)  # the staged list functions have no out-of-distribution demonstrations


def cipher(kind: str, text: str, shift: int = 0) -> str:
    """`text` enciphered: Caesar by `shift` or Atbash, letters only, case kept."""
    if kind == "caesar":
        k = shift % 26
        table = str.maketrans(_LOWER + _UPPER, _LOWER[k:] + _LOWER[:k] + _UPPER[k:] + _UPPER[:k])
    elif kind == "atbash":
        table = str.maketrans(_LOWER + _UPPER, _LOWER[::-1] + _UPPER[::-1])
    else:
        raise ValueError(f"cipher {kind!r}: expected one of {CIPHERS}")
    return text.translate(table)


def _pseudo_word(rng: random.Random) -> str:
    length = rng.randint(4, 10)
    letters = []
    while len(letters) < length:
        letters += [rng.choice(_CONSONANTS), rng.choice(_VOWELS)] + ([rng.choice(_CONSONANTS)] * rng.randint(0, 1))
    word = "".join(letters[:length])
    return word.capitalize() if rng.random() < 1 / 6 else word


def _random_letters(rng: random.Random) -> str:
    return "".join(rng.choice(_LOWER) for _ in range(rng.randint(4, 10)))


def _corrupt_text(rng: random.Random, text: str) -> str:
    """`text` with 1..len(text) letters replaced by a different letter of the same case."""
    chars = list(text)
    for i in rng.sample(range(len(chars)), rng.randint(1, len(chars))):
        alphabet = _UPPER if chars[i].isupper() else _LOWER
        chars[i] = rng.choice(alphabet.replace(chars[i], ""))
    return "".join(chars)


def _distinct(rng: random.Random, make: Callable[[random.Random], object], n: int, seen: set) -> list:
    out = []
    while len(out) < n:
        value = make(rng)
        key = repr(value)
        if key not in seen:
            seen.add(key)
            out.append(value)
    return out


def crypto_records(kind: str, *, n: int, seed: int, shifts=(1, 2, 3, 4, 5), counts: Counts = CRYPTO_COUNTS,
                   start_index: int = 0) -> list[dict]:
    """`n` cipher tasks of `kind` ("caesar" / "atbash") in the staged crypto format (module docstring); index =
    start_index, start_index + 1, ... No record names its shift: the rule stays hidden, as in the staged files."""
    if kind not in CIPHERS:
        raise ValueError(f"cipher {kind!r}: expected one of {CIPHERS}")
    if kind == "caesar" and (not shifts or any(not isinstance(k, int) or k % 26 == 0 for k in shifts)):
        raise ValueError(f"caesar shifts {shifts!r}: expected ints that are not multiples of 26")
    rng = random.Random(f"crypto/{kind}/{seed}")
    out = []
    for k in range(n):
        shift = rng.choice(shifts) if kind == "caesar" else 0
        seen: set = set()
        normal, ood, noise, test = (_distinct(rng, make, m, seen) for make, m in (
            (_pseudo_word, counts.normal), (_random_letters, counts.ood), (_pseudo_word, counts.noise),
            (_pseudo_word, counts.test)))
        normal, ood, test = ([{"input": w, "output": cipher(kind, w, shift)} for w in words]
                             for words in (normal, ood, test))
        noise = [{"input": w, "output": _corrupt_text(rng, cipher(kind, w, shift))} for w in noise]
        out.append({"train": {"normal": normal, "ood": ood, "noise": noise}, "test": test, "index": start_index + k})
    return out


@dataclasses.dataclass(frozen=True)
class Routine:
    """A hidden list rule: `expr` is the Python return expression over `x` (and the drawn int `k`), `comment` its
    description (both written into the record's `function`), `fn(x, k)` the same rule in Python, `ks` the k drawn
    from (None: no parameter), `min_len` the shortest input it is defined on."""

    name: str
    comment: str
    expr: str
    fn: Callable[[list[int], int], list[int]]
    ks: tuple[int, ...] | None = None
    min_len: int = 0


ROUTINES: tuple[Routine, ...] = (
    Routine("reverse", "reverse the list", "x[::-1]", lambda x, k: x[::-1]),
    Routine("sort", "sort in ascending order", "sorted(x)", lambda x, k: sorted(x)),
    Routine("sort_desc", "sort in descending order", "sorted(x, reverse=True)", lambda x, k: sorted(x, reverse=True)),
    Routine("take", "keep the first {k} elements", "x[:{k}]", lambda x, k: x[:k], (1, 2, 3)),
    Routine("drop", "remove the first {k} elements", "x[{k}:]", lambda x, k: x[k:], (1, 2)),
    Routine("evens", "keep the even elements", "[v for v in x if v % 2 == 0]",
            lambda x, k: [v for v in x if v % 2 == 0]),
    Routine("odds", "keep the odd elements", "[v for v in x if v % 2 == 1]", lambda x, k: [v for v in x if v % 2 == 1]),
    Routine("add", "add {k} to every element", "[v + {k} for v in x]", lambda x, k: [v + k for v in x],
            (1, 2, 3, 5, 10)),
    Routine("times", "multiply every element by {k}", "[v * {k} for v in x]", lambda x, k: [v * k for v in x], (2, 3)),
    Routine("greater", "keep the elements greater than {k}", "[v for v in x if v > {k}]",
            lambda x, k: [v for v in x if v > k], (20, 40, 50, 60)),
    Routine("last", "keep only the last element", "[x[-1]]", lambda x, k: [x[-1]], min_len=1),
    Routine("ends", "keep the first and the last element", "[x[0], x[-1]]", lambda x, k: [x[0], x[-1]], min_len=1),
    Routine("sum", "the sum of the elements", "[sum(x)]", lambda x, k: [sum(x)]),
    Routine("length", "the number of elements", "[len(x)]", lambda x, k: [len(x)]),
    Routine("max", "the largest element", "[max(x)]", lambda x, k: [max(x)], min_len=1),
    Routine("min", "the smallest element", "[min(x)]", lambda x, k: [min(x)], min_len=1),
    Routine("append", "append {k}", "x + [{k}]", lambda x, k: x + [k], (0, 7, 42)),
    Routine("prepend", "insert {k} at the front", "[{k}] + x", lambda x, k: [k] + x, (0, 7, 42)),
    Routine("rotate", "move the first element to the end", "x[1:] + x[:1]", lambda x, k: x[1:] + x[:1]),
    Routine("double", "repeat every element twice", "[v for v in x for _ in range(2)]",
            lambda x, k: [v for v in x for _ in range(2)]),
)
ROUTINE_NAMES = tuple(r.name for r in ROUTINES)


def function_source(fid: str, routine: Routine, k: int | None) -> str:
    """The record's `function` text, shaped like the staged ones ("def c102(x):\\n    # comment\\n    return ..")."""
    return (f"def {fid}(x):\n    # {routine.comment.format(k=k)}\n    return {routine.expr.format(k=k)}\n")


def _int_list(rng: random.Random, min_len: int) -> list[int]:
    return [rng.randint(0, 99) for _ in range(rng.randint(max(3, min_len), 8))]


def _corrupt_list(rng: random.Random, out: list[int]) -> list[int]:
    """`out` with one or two values changed (an empty output gains one value): never equal to `out`."""
    if not out:
        return [rng.randint(0, 99)]
    noisy = list(out)
    for i in rng.sample(range(len(noisy)), min(len(noisy), rng.randint(1, 2))):
        noisy[i] = rng.choice([v for v in range(100) if v != noisy[i]])
    return noisy


def list_function_records(*, n: int, seed: int, routines=ROUTINE_NAMES, counts: Counts = LIST_COUNTS,
                          start: int = 0) -> list[dict]:
    """`n` list-function tasks in the staged format (module docstring), ids g{start:03d}, g{start+1:03d}, ...;
    each routine drawn uniformly from `routines` (names in ROUTINE_NAMES)."""
    if counts.ood:
        raise ValueError(f"list functions: counts.ood={counts.ood}, expected 0 (the staged format has no ood pairs)")
    unknown = [r for r in routines if r not in ROUTINE_NAMES]
    if unknown or not routines:
        raise ValueError(f"list routines {unknown or routines!r}: expected names from {', '.join(ROUTINE_NAMES)}")
    chosen = [r for r in ROUTINES if r.name in routines]
    rng = random.Random(f"list_functions/{seed}")
    out = []
    for j in range(n):
        fid = f"g{start + j:03d}"
        while True:
            routine = rng.choice(chosen)
            k = rng.choice(routine.ks) if routine.ks else None
            seen: set = set()
            make = functools.partial(_int_list, min_len=routine.min_len)
            normal_in = _distinct(rng, make, counts.normal, seen)
            test_in = _distinct(rng, make, counts.test, seen)
            outputs = [routine.fn(list(x), k) for x in normal_in + test_in]
            if len({repr(o) for o in outputs}) > 1:  # a constant rule would say nothing about the inputs
                break
        noise_in = _distinct(rng, make, counts.noise, seen)
        normal, test = ([{"input": x, "output": routine.fn(list(x), k)} for x in xs] for xs in (normal_in, test_in))
        noise = [{"input": x, "output": _corrupt_list(rng, routine.fn(list(x), k))} for x in noise_in]
        out.append({"id": fid, "function": function_source(fid, routine, k),
                    "train": {"normal": normal, "ood": [], "noise": noise}, "test": test})
    return out
