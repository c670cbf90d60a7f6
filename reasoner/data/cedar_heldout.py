"""Held-out evaluation sets for CEDAR-GRPO with their task-native metric (accuracy: all are multiple choice).

    examples = load_heldout("defeasible_nli", data_dir="../shared/data")   # list[HeldoutExample]
    score(examples[0], "<think>...</think><answer>WEAKENS</answer>")        # 1.0 or 0.0

Datasets (files under `data_dir`, in the authors' published formats; the staged copies are samples):
  ecare           ecare/dev.jsonl (Waste-Wood/e-CARE `dataset/Causal_Reasoning/dev.jsonl`): premise, ask-for,
                  hypothesis1/2, label 0|1. Options "1", "2"; gold label + 1 (COPA numbering). Prompt: B.1.2 for a
                  cause question, B.2.2 for an effect question (`reasoner.tasks.cedar_eval_prompts`).
  defeasible_nli  defeasible_nli/defeasible-atomic/test.jsonl (rudinger/defeasible-nli): Premise, Hypothesis,
                  Update, UpdateType strengthener|weakener. Options STRENGTHENS, WEAKENS (B.2.3). Rows marked
                  UpdateTypeImpossible (no update was written) are dropped, as the dataset's README says.
  musr_murder / musr_object / musr_team
                  musr/{murder_mystery,object_placements,team_allocation}.json (Zayne-sprague/MuSR; the staged copies
                  are the `viewer/small_datasets/small_*.json` files, the full `datasets/*.json` have the same
                  format): one example per question of each story; options "0".."n-1", gold the question's `answer`
                  index (B.2.6-B.2.8). The `small_` file is read when the full one is absent.
`musr` names the three MuSR domains, reported separately as the paper's MuSR-M / -O / -T.

The checker reads the first `<answer>` span (`cedar_verify.answer_span`, as every CEDAR score does): an index
answer is parsed as an integer ("01" is 1; anything else scores 0), a label answer compared upper-cased and
stripped. Accuracy per dataset is successes / n (with a Wilson interval in `reasoner cedar eval`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from reasoner.data.jsonl import iter_jsonl
from reasoner.tasks.cedar_eval_prompts import (COPA_EFFECT_SYSTEM, COPA_EFFECT_USER, DEFEASIBLE_SYSTEM,
                                               DEFEASIBLE_USER, MUSR_SYSTEM, MUSR_USER, musr_problem)
from reasoner.tasks.cedar_prompts import SYSTEM, USER
from reasoner.tasks.cedar_verify import _field, answer_span  # the same missing-field error as the loaders

MUSR_FILES = {"musr_murder": ("murder", "murder_mystery"), "musr_object": ("object", "object_placements"),
              "musr_team": ("team", "team_allocation")}
HELDOUT = ("ecare", "defeasible_nli", *MUSR_FILES)
ALIASES = {"musr": tuple(MUSR_FILES), "e-care": ("ecare",), "defnli": ("defeasible_nli",)}
# name -> (path under data_dir, where to get it)
FILES = {
    "ecare": ("ecare/dev.jsonl", "dataset/Causal_Reasoning/dev.jsonl from github.com/Waste-Wood/e-CARE"),
    "defeasible_nli": ("defeasible_nli/defeasible-atomic/test.jsonl",
                       "data/defeasible-nli/defeasible-atomic/test.jsonl from github.com/rudinger/defeasible-nli"),
    **{name: (f"musr/{stem}.json", f"datasets/{stem}.json (or viewer/small_datasets/small_{stem}.json) from "
                                   "github.com/Zayne-sprague/MuSR")
       for name, (_, stem) in MUSR_FILES.items()},
}


@dataclasses.dataclass(frozen=True)
class HeldoutExample:
    """One question: `messages` the App. B [system, user] chat prompt, `options` the valid answers, `gold` one of
    them; `metric` the task-native metric ("accuracy")."""

    dataset: str
    id: str
    messages: tuple[dict, ...]
    options: tuple[str, ...]
    gold: str
    metric: str = "accuracy"

    def row(self) -> dict:
        """The JSON row `reasoner cedar eval` evaluates (the `prompt` it completes, `heldout` marks the scorer)."""
        return {"source": self.dataset, "heldout": True, "id": self.id, "uid": f"heldout/{self.dataset}/{self.id}",
                "prompt": list(self.messages), "options": list(self.options), "answer": self.gold,
                "metric": self.metric}


def heldout_names(spec: str) -> list[str]:
    """"ecare,musr" -> ["ecare", "musr_murder", "musr_object", "musr_team"] (order kept, duplicates dropped)."""
    out: list[str] = []
    for name in (s.strip().lower() for s in spec.split(",") if s.strip()):
        expanded = ALIASES.get(name, (name,))
        bad = [n for n in expanded if n not in HELDOUT]
        if bad:
            raise ValueError(f"held-out dataset {name!r}: expected names from {', '.join(HELDOUT + tuple(ALIASES))}")
        out += [n for n in expanded if n not in out]
    return out


def _path(name: str, data_dir: pathlib.Path) -> pathlib.Path:
    rel, where = FILES[name]
    path = data_dir / rel
    if name in MUSR_FILES and not path.is_file():
        path = path.with_name("small_" + path.name)
    if not path.is_file():
        raise FileNotFoundError(f"held-out {name}: {data_dir / rel} not found; download {where} to {data_dir / rel}"
                                " (the directory given by --data-dir)")
    return path


def _messages(system: str, user: str) -> tuple[dict, ...]:
    return ({"role": "system", "content": system}, {"role": "user", "content": user})


def _ecare(path: pathlib.Path) -> list[HeldoutExample]:
    out = []
    for lineno, row in iter_jsonl(path, what="e-CARE records"):
        where = f"{path}:{lineno}"
        ask, label = _field(row, "ask-for", where), _field(row, "label", where)
        if ask not in ("cause", "effect") or isinstance(label, bool) or label not in (0, 1):  # not true / false
            raise ValueError(f"{where}: ask-for {ask!r} / label {label!r}, expected cause|effect and 0|1")
        fields = {"premise": _field(row, "premise", where), "choice1": _field(row, "hypothesis1", where),
                  "choice2": _field(row, "hypothesis2", where)}
        system, user = (SYSTEM["balanced_copa"], USER["balanced_copa"]) if ask == "cause" else (
            COPA_EFFECT_SYSTEM, COPA_EFFECT_USER)
        out.append(HeldoutExample("ecare", str(row.get("index", lineno - 1)), _messages(system, user.format(**fields)),
                                  ("1", "2"), str(int(label) + 1)))  # a label 1.0 is gold "2", not "2.0"
    return out


def _defeasible(path: pathlib.Path) -> list[HeldoutExample]:
    out = []
    gold_of = {"strengthener": "STRENGTHENS", "weakener": "WEAKENS"}
    for lineno, row in iter_jsonl(path, what="defeasible-NLI records"):
        where = f"{path}:{lineno}"
        if row.get("UpdateTypeImpossible"):
            continue
        kind = _field(row, "UpdateType", where)
        if kind not in gold_of:
            raise ValueError(f"{where}: UpdateType {kind!r}, expected strengthener or weakener")
        user = DEFEASIBLE_USER.format(premise=_field(row, "Premise", where),
                                      hypothesis=_field(row, "Hypothesis", where), update=_field(row, "Update", where))
        out.append(HeldoutExample("defeasible_nli", str(lineno - 1), _messages(DEFEASIBLE_SYSTEM, user),
                                  ("STRENGTHENS", "WEAKENS"), gold_of[kind]))
    return out


def _musr(name: str, path: pathlib.Path) -> list[HeldoutExample]:
    try:
        stories = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{path}: not a JSON list of MuSR stories ({err})") from None
    if not isinstance(stories, list):
        raise ValueError(f"{path}: expected a JSON list of stories, got {type(stories).__name__}")
    system = MUSR_SYSTEM[MUSR_FILES[name][0]]
    out = []
    for s, story in enumerate(stories):
        where = f"{path}: story {s}"
        for q, item in enumerate(_field(story, "questions", where)):
            choices, answer = _field(item, "choices", where), _field(item, "answer", where)
            if not isinstance(answer, int) or isinstance(answer, bool) or not 0 <= answer < len(choices):
                raise ValueError(f"{where} question {q}: answer {answer!r} is not an index into {len(choices)} choices")
            user = MUSR_USER.format(context=_field(story, "context", where),
                                    problem=musr_problem(_field(item, "question", where), choices))
            out.append(HeldoutExample(name, f"{s}-{q}", _messages(system, user),
                                      tuple(str(i) for i in range(len(choices))), str(answer)))
    return out


def load_heldout(name: str, *, data_dir) -> list[HeldoutExample]:
    """The examples of held-out dataset `name` (module docstring); FileNotFoundError naming the file and where to
    download it, ValueError naming the line or story of a malformed record."""
    if name not in HELDOUT:
        raise ValueError(f"held-out dataset {name!r}: expected one of {', '.join(HELDOUT)}")
    path = _path(name, pathlib.Path(data_dir))
    if name == "ecare":
        return _ecare(path)
    if name == "defeasible_nli":
        return _defeasible(path)
    return _musr(name, path)


def score(example, completion: str) -> float:
    """Task-native accuracy of one completion (1.0 / 0.0, never raises): `example` a HeldoutExample or its `row()`."""
    options, gold = ((example.options, example.gold) if isinstance(example, HeldoutExample)
                     else (tuple(example["options"]), str(example["answer"])))
    answer = answer_span(completion)
    if answer is None:
        return 0.0
    if all(o.isdigit() for o in options):
        if not (answer.isascii() and answer.isdigit()) or len(answer) > 6:  # an ASCII index of a few digits
            return 0.0
        return float(str(int(answer)) == gold)
    return float(answer.upper() == gold.upper())
