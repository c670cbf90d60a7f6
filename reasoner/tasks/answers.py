"""Answer extraction and checking for four answer kinds: numbers, option letters, yes/no and `\\boxed{}` text.

    extract_answer("number", "... The answer is 1,234.") -> "1234"
    is_correct("text", r"\\boxed{\\frac12}", r"\\dfrac{1}{2}") -> True

Kinds (the RL-of-Thoughts code's four formats):
  number  - "The answer is N" (else the number right after the last "Answer:", else the last number in the last
            `\\boxed{}`, else the last number in the text; a LaTeX fraction of numbers, nested ones too, is one number:
            `\\frac{\\frac{1}{2}}{3}` is 1/6, and a mixed number `2\\frac{1}{3}` is 7/3, MATH's convention, see
            `_mixed_as_quotient`); compared as floats after removing
            everything but digits, sign and the decimal point (GSM8K's "#### 1,234" -> 1234): whole numbers
            exactly, others within a relative 1e-6.
  choice  - the first letter after the last "The answer is" (else the letter right after the last "Answer:", else
            the first in the last `\\boxed{}`, else the last letter written as an option, "(B)", "B)", "B:", "**B**");
            letters A-J (MMLU-Pro's ten; LogicalDeduction's A-G), a bare "I" only where it cannot be the pronoun
            ("The answer is I.", "I)", "**I**"; not "I think"); compared as upper-case letters.
  boolean - "The answer is yes/no" (also true/false; else the word right after the last "Answer:", else the first
            in the last `\\boxed{}`, else the last in the text); compared as booleans.
  text    - the last `\\boxed{...}` (balanced braces; `\\boxed 5` up to the next `$` as in Hendrycks' MATH; else the
            `$...$` or the sentence after "The answer is");
            compared with `normalize_math`, our normaliser in the spirit of Hendrycks' MATH `is_equiv`: it removes
            a whole-answer `\\boxed{}`, spaces, `\\left`/`\\right`, `\\!`, thin spaces `\\,` `\\;` `\\:`, dollars
            (`\\$` too), `^\\circ` and `°`, `\\text{units}` / `\\mbox{units}` after a value (also squared or cubed:
            `864 \\mbox{ inches}^2`; a word answer such as `\\text{east}` is kept), trailing dots, the parentheses of a
            lone capital letter (`\\text{(C)}` is `C`), and reads `10{,}080` as `10,080` (as Minerva's
            `normalize_final_answer` does); rewrites
            `\\dfrac`/`\\tfrac` -> `\\frac`, `\\frac12` -> `\\frac{1}{2}` (inside another `\\frac` too), `a/b` of
            integers -> `\\frac{a}{b}`, `0.5` -> `\\frac{1}{2}` when exact, a leading `x=`; and compares numerically
            when both sides are plain numbers (exactly when both are integers, decimals or fractions of them, nested
            fractions included: `\\frac{\\frac{1}{2}}{3}` equals `\\frac{1}{6}`; mixed numbers too: `1\\frac{4}{5}`
            equals `\\frac{9}{5}` and `1.8`).
A missing answer extracts as None and is never correct (choice: the authors guess a random letter; we do not,
so a reward is never noise; choose `fallback` in the environment if you want their behaviour).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

KINDS = ("number", "choice", "boolean", "text")
_ANSWER_IS = re.compile(r"answer is[:\s]*", re.IGNORECASE)
_FRAC = r"-?\\[dt]?frac\{-?\d+\}\{\d+\}"  # "\\frac{3}{4}": one number, not 3 and 4
_NUMBER = re.compile(_FRAC + r"|-?\$?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?(?:/\d+)?|-?\.\d+")


def _after_answer_is(text: str) -> str | None:
    found = list(_ANSWER_IS.finditer(text))
    return text[found[-1].end():] if found else None


def _after_answer_colon(text: str) -> str | None:
    """The text after the last "Answer:" (MMLU-Pro's second rule reads the letter right after it)."""
    found = list(re.finditer(r"(?i:answer)\s*:", text))
    return text[found[-1].end():] if found else None


def to_number(text: str) -> float | None:
    """'$1,234.50' -> 1234.5, '3/4' and '\\frac{3}{4}' -> 0.75, '1e5' -> 100000, '−7' (a Unicode minus) -> -7; None
    when no digit is left, for a zero denominator, and for a value past a float (1e999, a 400-digit integer): never
    raises."""
    try:
        value = _to_number(text)
    except (OverflowError, ValueError):  # int / int past a float, or past Python's 4,300-digit int limit
        return None
    return value if value is None or math.isfinite(value) else None


def _to_number(text: str) -> float | None:
    text = _fracs_as_quotients(text.replace("\u2212", "-"))
    plain = re.sub(r"[\s$,]", "", text).rstrip(".")
    latex = re.fullmatch(r"(-?)\\[dt]?frac\{(-?\d+)\}\{(\d+)\}", plain)
    if latex:
        plain = f"{'-' if latex.group(1) else ''}{latex.group(2)}/{latex.group(3)}".replace("--", "")
    fraction = re.fullmatch(r"(-?\d+)/(\d+)", plain)
    if fraction:
        denominator = int(fraction.group(2))
        return int(fraction.group(1)) / denominator if denominator else None
    if re.fullmatch(r"-?\d+(?:\.\d+)?[eE][+-]?\d+", plain):
        return float(plain)
    cleaned = re.sub(r"[^\d.\-]", "", text)
    cleaned = cleaned.rstrip(".")
    if not re.search(r"\d", cleaned):
        return None
    try:
        return float(cleaned)
    except ValueError:
        match = _NUMBER.search(text)
        return None if match is None else to_number(match.group(0).replace("$", "").replace(",", ""))


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`, `\\boxed {...}`) with balanced braces, or of the last
    `\\boxed 5` (no braces, as Hendrycks' MATH `last_boxed_only_string` and Minerva read it: up to the next `$`, not
    `\\$`; we also stop at a line end); None when absent or unbalanced."""
    found = list(re.finditer(r"\\(?:boxed|fbox)(\s*\{|\s+)", text))
    if not found:
        return None
    last = found[-1]
    if "{" not in last.group(1):
        return re.split(r"(?<!\\)\$|\n", text[last.end():], maxsplit=1)[0].strip() or None  # "\\$" is a dollar sign
    i = last.end()
    depth, j = 1, i
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[i:j - 1] if depth == 0 else None


def extract_answer(kind: str, text: str) -> str | None:
    """The answer string the text commits to, in the kind's canonical form, or None."""
    if kind not in KINDS:
        raise ValueError(f"answer kind {kind!r}: expected one of {KINDS}")
    text = text.replace("\u2212", "-")  # a Unicode minus sign is a minus sign
    if kind == "number":
        text = _fracs_as_quotients(text)
    tail = _after_answer_is(text)
    if kind == "number":
        for i, source in enumerate((tail, _after_answer_colon(text), last_boxed(text), text)):
            if source is None:
                continue
            if i == 1:  # the number right after the last "Answer:" ("Answer: 18 (we started with 20 eggs)")
                first = re.match(rf"[\s*$\\]*({_NUMBER.pattern})", source)
                numbers = [first.group(1)] if first else []
            else:
                numbers = _NUMBER.findall(source)
            if numbers:
                value = to_number(numbers[0] if i == 0 else numbers[-1])
                if value is not None:
                    return _format_number(value)
        return None
    if kind == "choice":
        # A-J (MMLU-Pro's ten options; LogicalDeduction's seven A-G): a bare "I" only where it cannot be the pronoun
        letter = r"\(([A-Ja-j])\)|\b([A-HJ])\b(?=[\s).,:;\]}\"'$]|\*\*|$)|\b(I)\b(?=[).:;\]}\"'$]|\*\*|$)"
        for i, source in enumerate((tail, _after_answer_colon(text), last_boxed(text), text)):
            if source is None:
                continue
            if i == 1:  # the letter right after the last "Answer:" ("**Answer: B**\n(A) is wrong because ...")
                match = re.match(rf"[\s*]*(?:{letter})", source)
            elif i < 3:  # the first letter after "answer is" (or in the last \boxed{}), whatever follows it
                # ("C, unknown", "C because", "**C**", "\boxed{C}", '"C"')
                match = re.search(letter, source)
            else:  # no "answer is": the last letter written as an option ("(B)", "B)", "B:", "B.", "**B**"), never the
                # article "A" in a sentence (nor the A of "A* search")
                matches = list(re.finditer(r"\(([A-Ja-j])\)|\b([A-HJ])\b(?:\)|:|\.|\*\*|$)|\b(I)\b(?:\)|\*\*)",
                                           source))
                match = matches[-1] if matches else None
            if match:
                return "".join(g or "" for g in match.groups()).upper()
        return None
    if kind == "boolean":
        for i, source in enumerate((tail, _after_answer_colon(text), last_boxed(text), text)):
            if source is None:
                continue
            if i == 1:  # the word right after the last "Answer:" ("Answer: Yes\nno other reading fits")
                first = re.match(r"[\s*]*(yes|no|true|false)\b", source.lower())
                words = [first.group(1)] if first else []
            else:
                words = re.findall(r"\b(yes|no|true|false)\b", source.lower())
            if words:
                return "yes" if (words[-1] if i == 3 else words[0]) in ("yes", "true") else "no"
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if tail is not None:  # Minerva's "The final answer is $X$. I hope it is correct.": the math span, else the line
        # up to its first sentence end ("3.5" keeps its point)
        span = re.match(r"\s*\$+((?:\\\$|[^$])*)\$", tail)
        answer = span.group(1) if span else re.split(r"\n|\.\s", tail.strip(), maxsplit=1)[0]
        return answer.strip().rstrip(".").strip() or None
    return None


def _format_number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def gold_number(answer: str) -> str:
    """GSM8K's gold: the text after '####' (or the whole string) as a canonical number."""
    value = to_number(answer.split("####")[-1])
    if value is None:
        raise ValueError(f"gold answer {answer[:60]!r}: expected a number (GSM8K '#### N')")
    return _format_number(value)


def is_correct(kind: str, prediction: str | None, gold: str) -> bool:
    """Whether an extracted `prediction` equals `gold` under the kind's comparison."""
    if prediction is None:
        return False
    if kind == "number":
        p, g = to_number(prediction), to_number(gold)
        if p is None or g is None:
            return False
        if p == int(p) and g == int(g):  # whole numbers exactly: 1000001 is not 1000000
            return p == g
        return abs(p - g) <= 1e-6 * max(1.0, abs(g))
    if kind == "choice":
        return prediction.strip().strip("()").upper() == gold.strip().strip("()").upper()
    if kind == "boolean":
        norm = {"yes": True, "true": True, "no": False, "false": False}
        return norm.get(prediction.strip().lower()) is not None and \
            norm.get(prediction.strip().lower()) == norm.get(str(gold).strip().lower())
    if kind == "text":
        return is_equiv(prediction, gold)
    raise ValueError(f"answer kind {kind!r}: expected one of {KINDS}")


# ------------------------------------------------------------------------------------ the math normaliser


def _fix_fracs(s: str, level: int = 0) -> str:
    r"""\frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}, \frac{1}2 -> \frac{1}{2}; inside the braced arguments of
    another \frac too, up to `_NESTING` deep (a bound on the recursion and the time)."""
    out, i = [], 0
    while True:
        j = s.find("\\frac", i)
        if j < 0:
            out.append(s[i:])
            return "".join(out)
        out.append(s[i:j + 5])
        k = j + 5
        for _ in range(2):
            if k < len(s) and s[k] == "{":
                depth, m = 1, k + 1
                while m < len(s) and depth:
                    depth += {"{": 1, "}": -1}.get(s[m], 0)
                    m += 1
                nested = level < _NESTING and not depth and "\\frac" in s[k + 1:m - 1]
                out.append("{" + _fix_fracs(s[k + 1:m - 1], level + 1) + "}" if nested else s[k:m])
                k = m
            elif k < len(s):
                out.append("{" + s[k] + "}")
                k += 1
        i = k


def _fix_sqrt(s: str) -> str:
    r"""\sqrt3 -> \sqrt{3}."""
    return re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)


def normalize_math(answer: str) -> str:
    """A canonical string for a MATH answer (see the module docstring for the rules)."""
    s = str(answer).strip()
    boxed = last_boxed(s)
    if boxed is not None and s.startswith(("\\boxed{", "\\fbox{")) and s.endswith("}") \
            and len(boxed) == len(s) - s.index("{") - 2:
        s = boxed.strip()  # the whole answer boxed: its content
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("\\,", "").replace("\\;", "").replace("\\:", "").replace("{,}", ",")  # thin spaces, "10{,}080"
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\u00b0", "").replace("\\%", "").replace("%", "")
    s = s.replace("\\$", "").replace("$", "")  # "\\$32" is 32 dollars: no stray backslash left
    # trailing units after a value only ("5\\text{ cm}", "864 \\mbox{ inches}^2"); a word answer is kept
    s = re.sub(r"(?<=\S)\s*\\(?:text|mbox|mathrm)\{\s*[a-zA-Z ]*\}(?:\^\{?[23]\}?)?$", "", s).strip()
    s = re.sub(r"\\(?:text|textbf|mbox|mathrm)\{([^}]*)\}", r"\1", s)
    s = s.replace(" ", "").rstrip(".")
    if re.fullmatch(r"[a-zA-Z]\w*=.+", s) and s.count("=") == 1:
        s = s.split("=", 1)[1]
    s = _fix_sqrt(_fix_fracs(s))
    if s.startswith("."):
        s = "0" + s
    s = s.replace("{.", "{0.")
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    if m:
        s = f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"
    m = re.fullmatch(r"-?\d+\.\d+", s)
    if m:
        f = Fraction(s)
        if f.denominator != 1 and f.denominator <= 1000:
            s = f"\\frac{{{f.numerator}}}{{{f.denominator}}}" if f > 0 else f"-\\frac{{{-f.numerator}}}{{{f.denominator}}}"
        else:
            s = str(f.numerator) if f.denominator == 1 else s
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", s):
        s = s.replace(",", "")
    if re.fullmatch(r"\([A-Z]\)", s):  # a multiple-choice letter: "\\text{(C)}" is "C"
        s = s[1]
    return s


def _as_number(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        exact = _as_fraction(s)
        try:
            return None if exact is None else float(exact)
        except OverflowError:  # a quotient past a float
            return None


def _as_fraction(s: str) -> Fraction | None:
    """The exact value of an integer, a decimal or `\\frac{a}{b}` (also `\\dfrac`, `\\tfrac`, `\\frac12`) of such
    values, nested ones included (`\\frac{\\frac{1}{2}}{3}` is 1/6); None for anything else and a zero
    denominator."""
    s = _fracs_as_quotients(s).strip()
    try:
        return Fraction(s) if re.fullmatch(rf"-?{_RATIONAL}", s) else None
    except (ValueError, ZeroDivisionError):  # digits past Python's int limit, "1/0"
        return None


_RATIONAL = r"(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?"
# not glued to a digit: "1\frac{4}{5}" (MATH's mixed number 9/5) must not become "14/5", nor "\frac{1}{2}3" "1/23"
_FRAC_ARGUMENT = rf"(?:\{{\s*(-?{_RATIONAL})\s*\}}|(\d))"
_NUMERIC_FRAC = re.compile(rf"(?<![\d.])\\[dt]?frac\s*{_FRAC_ARGUMENT}{_FRAC_ARGUMENT}(?!\d|\.\d)")
_NESTING = 8  # fractions of fractions are read this deep (one pass each): linear time on any text
# a mixed number "1\frac{4}{5}" (also "1 \tfrac{4}{5}", "1\frac45"): a whole part that is its own token (not the
# end of a decimal, an exponent "x^2\frac{1}{2}" or "^{2}\frac", a subscript or a name) and a proper fraction of
# integers, "{}{}" or one digit each
_MIXED = re.compile(r"(?<![\w.^_}\\])(?<!\^\{)(?<!_\{)(\d+)[ \t]*\\[dt]?frac\s*(?:\{\s*(\d+)\s*\}|(\d))"
                    r"(?:\{\s*(\d+)\s*\}|(\d))(?!\d|\.\d)")


def _mixed_as_quotient(m: re.Match) -> str:
    """'1\\frac{4}{5}' -> '9/5'. MATH writes mixed numbers so: its gold for test/geometry/826.json is 1\\frac{4}{5}
    (the solution's 9/5), and all 10 places in the 300 staged solutions where a whole number stands right before a
    numeric \\frac are mixed numbers ("4\\dfrac{5}{8} = 4 + \\dfrac{5}{8}", "33\\frac{1}{3}=100/3"), none a
    product. We read them so (2\\frac{1}{3} is 7/3, not 2 * 1/3); a sign before the whole part applies to the
    whole ("-3\\frac{1}{2}" is -7/2: the "-" stays in front of the quotient). Only a proper fraction with a
    positive numerator makes a mixed number: "1\\frac{5}{4}" or "1\\frac{0}{5}" is no conventional one, so it
    stays as written (no number). Nothing else changes: "\\frac{4}{5}x" is no number either way, and
    "10\\frac{1}{2}\\%" is 10.5 like "10.5\\%" (the normaliser drops a percent sign from any answer)."""
    try:
        whole, numerator, denominator = int(m.group(1)), int(m.group(2) or m.group(3)), int(m.group(4) or m.group(5))
    except ValueError:  # digits past Python's int limit
        return m.group(0)
    if not 0 < numerator < denominator:
        return m.group(0)
    return f"{whole * denominator + numerator}/{denominator}"


def _fracs_as_quotients(text: str) -> str:
    """Each LaTeX fraction of numbers written as "p/q" ("\\frac{\\frac{1}{2}}{3}" -> "1/6"), innermost first and up
    to `_NESTING` deep, so that a number reader takes it as one number, not its first digits; one that is not a
    number (`\\frac{\\pi}{2}`) or divides by zero stays as written. A mixed number ("1\\frac{4}{5}" -> "9/5", see
    `_mixed_as_quotient`) is read first, so that its fraction is not read apart from its whole part."""
    text = _MIXED.sub(_mixed_as_quotient, text) if "frac" in text else text

    def quotient(m: re.Match) -> str:
        try:
            value = Fraction(m.group(1) or m.group(2)) / Fraction(m.group(3) or m.group(4))
        except (ValueError, ZeroDivisionError):  # a zero denominator, digits past Python's int limit
            return m.group(0)
        return str(value)  # "1/6", "-3/4", "2"

    for _ in range(_NESTING):
        text, count = _NUMERIC_FRAC.subn(quotient, text)
        if not count:
            break
    return text


def is_equiv(a: str | None, b: str | None) -> bool:
    """MATH-style equivalence of two answer strings after `normalize_math`."""
    if a is None or b is None:
        return False
    na, nb = normalize_math(a), normalize_math(b)
    if not na or not nb:  # nothing left to compare is never a match
        return False
    if na == nb:
        return True
    fx, fy = _as_fraction(na), _as_fraction(nb)
    if fx is not None and fy is not None:  # exact: 11111111101 is not 11111111100 (a float tolerance said it was)
        return fx == fy
    x, y = _as_number(na), _as_number(nb)
    return x is not None and y is not None and abs(x - y) <= 1e-9 * max(1.0, abs(y))
