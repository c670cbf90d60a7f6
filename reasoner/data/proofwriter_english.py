"""Parser for ProofWriter's English sentence templates, and the Logic-LLM processed form that carries them.

The processed form (teacherpeterpan/Logic-LLM `data/ProofWriter/*.json`) is a JSON list of
`{id, context, question, options, answer}`: `context` is the theory, `question` ends with the statement, `answer` is
A (True), B (False) or C (Unknown). Sentences are mapped to atoms and rules by the convention of `proofwriter_atoms`.

Templates covered (ProofWriter's generator; "something"/"someone" is the variable `?x`, "it"/"they" refer back to it):
  facts       Bob is red. | Bob is not red. | The cat sees the dog. | The cat does not see the dog.
  universals  All red things are big. | Red, cold people are not big. | All young, quiet things are smart.
  rules       If <clause> (and <clause>)* then <clause>.   with clauses like "something is red", "it is cold and
              not big", "they see the dog", "the tiger visits the dog", "Dave is smart", "it does not eat the cat";
              also DeepRD's logic mode "If someone is X, they are Y.".
  modal verbs (ProofWriter's Birds theories): "Bob can fly." | "Bob cannot fly." | "If someone is a bird and not
              abnormal then they can fly." -> can_fly(Bob) / not_can_fly(Bob) (`proofwriter_atoms.modal_atom`).
ProntoQA's categorical sentences are also accepted: "Every tumpus is a wumpus.", "Each yumpus is not sour.",
"Tumpuses are wumpuses.", "Wren is a tumpus." (nouns and adjectives are both unary predicates; the plurals of
plural generics are singularized so "tumpuses"/"tumpus" meet). Anything else raises `SentenceError`, which loaders
collect with ids.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re

from reasoner.data.proofwriter_atoms import VARIABLE, modal_atom, negate, third_person
from search.logic import Atom, Program, Rule

__all__ = ["SentenceError", "parse_sentence", "parse_theory_text", "parse_theory_sentences", "parse_statement",
           "split_sentences", "LogicLLMQuestion", "load_logic_llm", "ANSWER_LABELS"]

ANSWER_LABELS = {"A": True, "B": False, "C": None}
_VAR_SUBJECTS = {"something", "someone", "somebody", "everything", "everyone"}
_PRONOUNS = {"it", "they", "he", "she"}
_BE = {"is", "are"}
_QUANT = {"all", "every", "each"}
_KINDS = {"things", "people", "thing", "person", "animals"}


class SentenceError(ValueError):
    """A sentence outside the supported templates."""


@dataclasses.dataclass(frozen=True)
class LogicLLMQuestion:
    id: str
    context: str
    statement_text: str
    program: Program
    statement: Atom
    answer: bool | None  # True (A), False (B), None (C: Unknown)
    rule_texts: tuple[str, ...] = ()  # the theory's sentence for each rule of `program`, in rule order


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


def _words(text: str) -> list[str]:
    text = text.strip().rstrip(".").strip()
    return [w for w in re.split(r"\s+|(?=,)|(?<=,)", text) if w]


def _singular(word: str) -> str:
    """ProntoQA plural nouns ("tumpuses", "wumpuses", "cats") -> singular; adjectives pass unchanged."""
    if word.endswith("uses") or word.endswith("shes") or word.endswith("ches") or word.endswith("xes"):
        return word[:-2]
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and not word.endswith("us") and len(word) > 3:
        return word[:-1]
    return word


def _subject(words: list[str], *, context_subject: str | None) -> tuple[str, list[str]]:
    """Split off the subject noun phrase; returns (term, remaining words)."""
    if not words:
        raise SentenceError("missing subject")
    first = words[0].lower()
    if first in _VAR_SUBJECTS:
        return VARIABLE, words[1:]
    if first in _PRONOUNS:
        if context_subject is None:
            raise SentenceError(f"pronoun {words[0]!r} with nothing to refer to")
        return context_subject, words[1:]
    if first == "the":
        # "the bald eagle sees ...": the noun phrase runs up to the verb: "is"/"are"/"does"/"do", or the first
        # word followed by an object ("the ..." or a final proper name).
        for i in range(2, len(words)):
            w = words[i].lower()
            takes_object = i + 1 < len(words) and (words[i + 1].lower() == "the"
                                                    or (i + 2 == len(words) and words[i + 1][:1].isupper()))
            if w in _BE or w in ("does", "do", "can", "cannot") or takes_object:
                return "the " + " ".join(x.lower() for x in words[1:i]), words[i:]
        raise SentenceError(f"no verb after subject {' '.join(words)!r}")
    if words[0][:1].isupper() and words[0].isalpha():
        return words[0], words[1:]
    raise SentenceError(f"unrecognised subject {words[0]!r}")


def _object(words: list[str]) -> str:
    if not words:
        raise SentenceError("missing object")
    if words[0].lower() == "the" and len(words) > 1:
        return "the " + " ".join(w.lower() for w in words[1:])
    if len(words) == 1 and words[0][:1].isupper():
        return words[0]
    if len(words) == 1 and words[0].lower() in _VAR_SUBJECTS:
        return VARIABLE
    raise SentenceError(f"unrecognised object {' '.join(words)!r}")


def _predicate(subject: str, words: list[str], *, plural: bool) -> Atom:
    """The predicate part of a clause ("is not red", "sees the dog", "do not see the dog", "is a wumpus")."""
    if not words:
        raise SentenceError("missing predicate")
    head = words[0].lower()
    if head in _BE:
        rest = [w.lower() for w in words[1:]]
        positive = True
        if rest[:1] == ["not"]:
            positive, rest = False, rest[1:]
        if rest[:1] in (["a"], ["an"]):
            rest = rest[1:]
        if len(rest) != 1 or not rest[0].replace("-", "").isalpha():
            raise SentenceError(f"expected one adjective or noun after {head!r}, got {' '.join(words[1:])!r}")
        atom = Atom(rest[0], (subject,))
        return atom if positive else negate(atom)
    if head in ("can", "cannot"):
        rest = [w.lower() for w in words[1:]]
        positive = head == "can"
        if positive and rest[:1] == ["not"]:
            positive, rest = False, rest[1:]
        if len(rest) != 1 or not rest[0].isalpha():
            raise SentenceError(f"expected one verb after {head!r}, got {' '.join(words[1:])!r}")
        return modal_atom(subject, rest[0], positive=positive)
    if head in ("does", "do"):
        if len(words) < 3 or words[1].lower() != "not":
            raise SentenceError(f"expected '{head} not <verb> <object>', got {' '.join(words)!r}")
        return negate(Atom(third_person(words[2].lower()), (subject, _object(words[3:]))))
    verb = head if not plural else third_person(head)
    if not verb.isalpha():
        raise SentenceError(f"unrecognised verb {words[0]!r}")
    return Atom(verb, (subject, _object(words[1:])))


def _clause(words: list[str], *, context_subject: str | None) -> Atom:
    subject, rest = _subject(words, context_subject=context_subject)
    plural = words[0].lower() == "they"
    return _predicate(subject, rest, plural=plural)


def _conjunction(text: str, *, context_subject: str | None) -> tuple[list[Atom], str | None]:
    """"something is red and not big and it sees the cat" -> atoms; bare "X"/"not X" reuse the last subject."""
    atoms: list[Atom] = []
    subject = context_subject
    for part in re.split(r"\s+and\s+", text.strip()):
        words = _words(part)
        lowered = [w.lower() for w in words]
        bare = atoms and (len(words) == 1 or (len(words) == 2 and lowered[0] == "not")) and lowered[0] not in _PRONOUNS
        if bare:
            if not atoms[-1].args or len(atoms[-1].args) != 1:
                raise SentenceError(f"bare {part!r} must follow an 'is' clause")
            atom = Atom(lowered[-1], (atoms[-1].args[0],))
            atoms.append(atom if len(words) == 1 else negate(atom))
            continue
        atom = _clause(words, context_subject=subject)
        if subject != VARIABLE:  # "it"/"they" refer to "something"/"someone" once it has appeared
            subject = atom.args[0]
        atoms.append(atom)
    return atoms, subject


def _universal(words: list[str], name: str) -> Rule | None:
    """"All red, cold things are not big" / "Every tumpus is a wumpus" / "Tumpuses are wumpuses"."""
    low = [w.lower() for w in words]
    if low and low[0] in _QUANT:
        low = low[1:]
    if "are" in low:
        cut = low.index("are")
    elif "is" in low:
        cut = low.index("is")
    else:
        return None
    left, right = low[:cut], low[cut + 1:]
    if left and left[-1] in _KINDS:
        left = left[:-1]
    adjectives = [w for w in left if w != ","]
    if not adjectives or any(not w.isalpha() for w in adjectives) or left[-1:] == [","]:
        return None
    positive = True
    if right[:1] == ["not"]:
        positive, right = False, right[1:]
    if right[:1] in (["a"], ["an"]):
        right = right[1:]
    if len(right) != 1 or not right[0].isalpha():
        return None
    # Only plural generics ("Tumpuses are wumpuses") need singular predicates to meet "Wren is a tumpus".
    norm = _singular if low[cut] == "are" else (lambda w: w)
    premises = tuple(Atom(norm(a), (VARIABLE,)) for a in adjectives)
    conclusion = Atom(norm(right[0]), (VARIABLE,))
    return Rule(premises, conclusion if positive else negate(conclusion), name)


def parse_sentence(sentence: str, *, name: str = "") -> Atom | Rule:
    """One sentence -> a ground fact (Atom) or a Rule named `name`. Raises SentenceError naming the sentence."""
    text = " ".join(sentence.split()).rstrip(".").strip()
    try:
        if not text:
            raise SentenceError("empty sentence")
        m = re.fullmatch(r"if (.+?),? then (.+)", text, flags=re.IGNORECASE) or re.fullmatch(
            r"if (.+?), ((?:they|it) .+)", text, flags=re.IGNORECASE)  # logic mode: "If someone is X, they are Y."
        if m:
            premises, subject = _conjunction(m.group(1), context_subject=None)
            conclusions, _ = _conjunction(m.group(2), context_subject=subject)
            if len(conclusions) != 1:
                raise SentenceError("expected one conclusion")
            return Rule(tuple(premises), conclusions[0], name)
        words = _words(text)
        if not words:
            raise SentenceError("no words")
        first = words[0].lower()
        is_fact_subject = first in ("the",) or (words[0][:1].isupper() and first not in _QUANT and len(words) > 1
                                                 and words[1].lower() not in ("things", "people", ",", "are"))
        if is_fact_subject and first not in _VAR_SUBJECTS:
            try:
                atom = _clause(words, context_subject=None)
                if not atom.is_ground:
                    raise SentenceError("a fact must be ground")
                return atom
            except SentenceError:
                pass  # "Cold things are ..." and ProntoQA plurals fall through to the universal templates
        rule = _universal(words, name)
        if rule is not None:
            return rule
        raise SentenceError("no template matches")
    except SentenceError as err:
        raise SentenceError(f"cannot parse sentence {sentence!r}: {err}") from None


def parse_theory_text(text: str, *, theory_id: str = "") -> tuple[Program, list[tuple[str, str]]]:
    """Theory paragraph -> Program (facts in order, rules named rule1, rule2, ...) and (id, error) failures."""
    program, failures, _ = parse_theory_sentences(text, theory_id=theory_id)
    return program, failures


def parse_theory_sentences(text: str, *, theory_id: str = "") -> tuple[Program, list[tuple[str, str]], list[str]]:
    """Like `parse_theory_text`, also returning each rule's own sentence (for the verbalizer's `rule_texts`)."""
    axioms: list[Atom] = []
    rules: list[Rule] = []
    texts: list[str] = []
    failures: list[tuple[str, str]] = []
    for sentence in split_sentences(text):
        try:
            parsed = parse_sentence(sentence, name=f"rule{len(rules) + 1}")
        except SentenceError as err:
            failures.append((theory_id, str(err)))
            continue
        if isinstance(parsed, Rule):
            rules.append(parsed)
            texts.append(sentence)
        elif parsed not in axioms:
            axioms.append(parsed)
    return Program(tuple(axioms), tuple(rules)), failures, texts


def parse_statement(question: str) -> Atom:
    """"Based on ... true, false, or unknown? Charlie is kind." -> kind(Charlie). Also "Is it true that ...?"."""
    text = question.strip()
    if "?" in text.rstrip("?"):
        text = text.rstrip("?").rsplit("?", 1)[1]
    text = re.sub(r"^(is it true that|true or false:)\s+", "", text.strip(), flags=re.IGNORECASE).rstrip("?")
    parsed = parse_sentence(text)
    if not isinstance(parsed, Atom) or not parsed.is_ground:
        raise SentenceError(f"statement {text!r} is not a ground fact")
    return parsed


def load_logic_llm(path: str | pathlib.Path) -> tuple[list[LogicLLMQuestion], list[tuple[str, str]]]:
    """Read a Logic-LLM JSON file; returns questions and (id, reason) skip reports (never stops at a bad item).

    A question is skipped when its theory has an unparsed sentence, its statement does not parse, or its answer
    is not A/B/C; every failed sentence is reported with the question id.
    """
    path = pathlib.Path(path)
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return [], [(str(path), f"unreadable file: {err}")]
    if not isinstance(records, list):
        return [], [(str(path), "expected a JSON list of {id, context, question, options, answer}")]
    questions: list[LogicLLMQuestion] = []
    skipped: list[tuple[str, str]] = []
    theory_cache: dict[str, tuple[Program, list, list]] = {}
    for i, rec in enumerate(records):
        qid = str(rec.get("id", f"{path.name}[{i}]")) if isinstance(rec, dict) else f"{path.name}[{i}]"
        try:
            context, question, answer = rec["context"], rec["question"], rec["answer"]
        except (TypeError, KeyError) as err:
            skipped.append((qid, f"missing field {err}: expected id, context, question, options, answer"))
            continue
        if answer not in ANSWER_LABELS:
            skipped.append((qid, f"bad answer {answer!r}: expected A, B or C"))
            continue
        if context not in theory_cache:
            theory_cache[context] = parse_theory_sentences(context, theory_id=qid)
        program, failures, rule_texts = theory_cache[context]
        if failures:
            skipped.extend((qid, reason) for _, reason in failures)
            continue
        try:
            statement = parse_statement(question)
        except SentenceError as err:
            skipped.append((qid, str(err)))
            continue
        text = question.rstrip().rsplit("?", 1)[-1].strip() or question
        questions.append(LogicLLMQuestion(qid, context, text, program, statement, ANSWER_LABELS[answer],
                                          tuple(rule_texts)))
    return questions, skipped
