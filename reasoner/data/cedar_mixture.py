"""CEDAR-GRPO's training mixture (App. A.1, Table 5) from the sources' published files.

    spec = MixtureSpec(scale=0.05, seed=42)
    mixture = build_mixture(spec, data_dir="../shared/data", user_dir=None)
    write_mixture(mixture, out_dir="data/cedar")   # train.jsonl, validation.jsonl, mixture.json

Per-source counts are the paper's (train / validation: 320 / 80 for UniADILR, Balanced COPA, CauseLogics,
CLIMATE-FEVER and AbductionRules; 160 / 40 for Crypto and ListFunction), times `scale` (`validation_scale` for the
validation split), rounded half up; a source's count is shared evenly by its balanced groups (AbductionRules' four
variants, one query sampled per context; Crypto's Caesar and Atbash; CauseLogics' difficulty levels, one file
each). Within a group the records are shuffled with `seed`; validation takes the first, training the next ones, so
the two never share a record (AbductionRules: training from a variant's `train.jsonl` when it is there, as in the
paper, else from the staged `dev.jsonl` contexts validation did not take). A group with too few records gives
what it has; `Mixture.notes` says so.

Every written row (one example): `source`, `group`, `id` (the record's own id), `uid` (source/group/id), `prompt`
(the App. B.1 chat messages, `reasoner.tasks.cedar_prompts`) and the gold fields of `cedar_verify.example_of`
(`answer`, or `tests` for code), which is what `cedar_correctness` / `cedar_verify.record_of` read.

Balanced COPA, CLIMATE-FEVER and CauseLogics carry no licence that lets us ship them: they are read from
`user_dir` when given (layout in `USER_FILES`); without them the mixture leaves them out and `notes` names what to
download and where. `max_prompt_chars` > 0 keeps only records whose rendered prompt is at most that long (CPU runs).

`generated_crypto` / `generated_list_functions` > 0 add that many of our own tasks (`reasoner.data.cedar_generators`,
seeded by `seed`; Crypto shared evenly by Caesar and Atbash) to the TRAINING split beside the staged rows, as groups
`generated_caesar`, `generated_atbash` and `generated`; validation stays the published records. `counts[source]`
then also has `generated`, the number of training rows that are ours.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import random
from collections.abc import Mapping

from reasoner.data.jsonl import iter_jsonl, write_jsonl
from reasoner.tasks.cedar_prompts import training_messages
from reasoner.tasks.cedar_verify import SOURCES, CedarRecord, example_of, load_records, record_of

PAPER_TRAIN = {"uniadilr": 320, "balanced_copa": 320, "causelogics": 320, "climate_fever": 320,
               "abductionrules": 320, "crypto": 160, "list_functions": 160}
PAPER_VALIDATION = {s: n // 4 for s, n in PAPER_TRAIN.items()}  # the 80/20 split: 80 / 40
ABDUCTION_VARIANTS = ("Abduction-Animal-Simple", "Abduction-Animal", "Abduction-Person-Simple", "Abduction-Person")
# source -> {group: path under --data-dir}; AbductionRules groups are directories holding dev.jsonl (+ train.jsonl)
STAGED = {
    "abductionrules": {v: f"abductionrules/{v}" for v in ABDUCTION_VARIANTS},
    "uniadilr": {"HGc": "uniadilr/abduction.jsonl"},
    "list_functions": {"all": "list_functions/list_functions.jsonl"},
    "crypto": {"caesar": "crypto/caesar.jsonl", "atbash": "crypto/atbash.jsonl"},
}
# source -> (glob under the user directory, where to get it); each matching file is one balanced group
USER_FILES = {
    "balanced_copa": ("balanced_copa/train.jsonl",
                      "the Balanced COPA training set as JSON lines (id, premise, choice1, choice2, question, label, "
                      "mirrored), e.g. the `train` split of the Hugging Face dataset pkavumba/balanced-copa, saved "
                      "with `Dataset.to_json`; only question == 'cause' rows are used"),
    "climate_fever": ("climate_fever/*.jsonl",
                      "CLIMATE-FEVER's dataset/climate-fever.jsonl from github.com/tdiggelm/climate-fever-dataset "
                      "(claim_id, claim, claim_label, evidences)"),
    "causelogics": ("causelogics/*.jsonl",
                    "the CauseLogics benchmark of the paper's ref. [12], one JSON-lines file per difficulty level "
                    "(Premises, Rules, Phenomenon, Possible Cause, Label)"),
}


@dataclasses.dataclass(frozen=True)
class MixtureSpec:
    """scale: multiplies the paper's per-source counts (1.0 = Table 5); validation_scale: the same for the
    validation split (None = scale); sources: which to include; max_prompt_chars: 0 = no limit."""

    scale: float = 1.0
    validation_scale: float | None = None
    seed: int = 42
    sources: tuple[str, ...] = SOURCES
    max_prompt_chars: int = 0
    generated_crypto: int = 0
    generated_list_functions: int = 0

    def __post_init__(self):
        for name in ("generated_crypto", "generated_list_functions"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"mixture {name}={getattr(self, name)!r}: expected an int >= 0")
        for name in ("scale", "validation_scale"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1000:
                raise ValueError(f"mixture {name}={value!r}: expected a number in [0, 1000]")
        unknown = [s for s in self.sources if s not in SOURCES]
        if unknown:
            raise ValueError(f"mixture sources {unknown}: expected names from {', '.join(SOURCES)}")

    def count(self, source: str, split: str) -> int:
        paper = PAPER_TRAIN if split == "train" else PAPER_VALIDATION
        scale = self.scale if split == "train" or self.validation_scale is None else self.validation_scale
        return int(math.floor(paper[source] * scale + 0.5))  # half up: 40 x 0.0125 -> 1


@dataclasses.dataclass
class Mixture:
    """train / validation rows (see module docstring), counts[source][split], and notes for the user."""

    train: list[dict]
    validation: list[dict]
    counts: dict[str, dict[str, int]]
    notes: list[str]


@dataclasses.dataclass(frozen=True)
class _Item:
    row: Mapping  # the raw row the prompt is rendered from
    record: CedarRecord
    prompt: list[dict]  # its App. B prompt (`training_messages`), rendered once


def missing_data_message(data_dir: pathlib.Path, sources) -> str | None:
    """None when every staged file of `sources` is under `data_dir`; else the files to download and where."""
    missing = []
    for source in sources:
        for group, rel in STAGED.get(source, {}).items():
            path = data_dir / rel
            wanted = path / "dev.jsonl" if source == "abductionrules" else path
            if not wanted.is_file():
                missing.append(str(wanted.relative_to(data_dir)))
    if not missing:
        return None
    return (f"the CEDAR mixture reads the sources' published files from {data_dir} (--data-dir), and these are "
            f"missing: {', '.join(missing)}. Download them into that folder: AbductionRules "
            "datasets/<variant>/{train,dev}.jsonl from github.com/Strong-AI-Lab/AbductionRules -> "
            "abductionrules/<variant>/; UniADILR data/UniADILR-HGc/abduction.jsonl from github.com/YuSheng-00/UniADILR "
            "-> uniadilr/abduction.jsonl; datasets/list_functions/list_functions.jsonl and datasets/crypto/"
            "{caesar,atbash}.jsonl from github.com/HKUST-KnowComp/Robust-Rule-Induction -> list_functions/ and "
            "crypto/")


def _paired(source: str, path: pathlib.Path) -> list[_Item]:
    """Raw rows and their verifier records, in file order (AbductionRules: one item per question). A row whose
    App. B prompt cannot be rendered (a field missing or of the wrong shape) is a ValueError naming its line."""
    records = load_records(source, path)
    rows = []
    for lineno, row in iter_jsonl(path, what=f"{source} records"):
        if source == "abductionrules":
            rows += [(lineno, {"context": row["context"], "question": q}) for q in row["questions"]]
        else:
            rows.append((lineno, row))
    items = []
    for (lineno, row), record in zip(rows, records, strict=True):
        try:
            items.append(_Item(row, record, training_messages(source, row)))
        except ValueError as err:
            raise ValueError(f"{path}:{lineno}: {err}") from None
    return items


def _one_query_per_context(items: list[_Item], rng: random.Random) -> list[_Item]:
    by_context: dict[str, list[_Item]] = {}
    for item in items:
        by_context.setdefault(item.row["context"], []).append(item)
    return [rng.choice(group) for group in by_context.values()]


def _groups(source: str, data_dir: pathlib.Path, user_dir: pathlib.Path | None, rng: random.Random,
            notes: list[str]) -> dict[str, tuple[list[_Item], list[_Item] | None]]:
    """{group: (pool, separate training pool or None)} of one source."""
    out = {}
    if source in STAGED:
        for group, rel in STAGED[source].items():
            path = data_dir / rel
            if source == "abductionrules":
                dev = _one_query_per_context(_paired(source, path / "dev.jsonl"), rng)
                train = path / "train.jsonl"
                out[group] = (dev, _one_query_per_context(_paired(source, train), rng) if train.is_file() else None)
            else:
                out[group] = (_paired(source, path), None)
        return out
    pattern, what = USER_FILES[source]
    files = sorted(user_dir.glob(pattern)) if user_dir is not None else []
    if not files:
        where = user_dir / pattern if user_dir is not None else f"<user dir>/{pattern}"
        notes.append(f"{source}: left out (not shippable). To include it download {what} to {where} and pass "
                     "--user-data-dir")
        return {}
    for path in files:
        items = _paired(source, path)
        if source == "balanced_copa":
            items = [i for i in items if i.row.get("question") == "cause"]
        out[path.stem] = (items, None)
    return out


def _shares(total: int, groups: int) -> list[int]:
    return [total // groups + (k < total % groups) for k in range(groups)]


def _short(items: list[_Item], max_chars: int) -> list[_Item]:
    """The items whose rendered prompt (system + user) has at most `max_chars` characters."""
    return [i for i in items if sum(len(m["content"]) for m in i.prompt) <= max_chars]


def example_row(source: str, group: str, item: _Item) -> dict:
    """The written example of one record: its gold fields, source, group, uid and App. B prompt."""
    return {**example_of(item.record), "group": group, "uid": f"{source}/{group}/{item.record.id}",
            "prompt": item.prompt}


def build_mixture(spec: MixtureSpec, *, data_dir, user_dir=None) -> Mixture:
    """The mixture of `spec` (module docstring). FileNotFoundError naming the files to download when a staged
    source is missing under `data_dir`."""
    data_dir = pathlib.Path(data_dir)
    user_dir = pathlib.Path(user_dir) if user_dir else None
    if user_dir is not None and not user_dir.is_dir():
        raise FileNotFoundError(f"--user-data-dir {user_dir}: no such directory; expected one holding "
                                + "; ".join(f"{s}: {p}" for s, (p, _) in USER_FILES.items()))
    message = missing_data_message(data_dir, [s for s in spec.sources if s in STAGED])
    if message:
        raise FileNotFoundError(message)
    rng = random.Random(spec.seed)
    train, validation, counts, notes = [], [], {}, []
    for source in spec.sources:
        groups = _groups(source, data_dir, user_dir, rng, notes)
        if not groups:
            continue
        wanted = {split: _shares(spec.count(source, split), len(groups)) for split in ("train", "validation")}
        got = {"train": 0, "validation": 0}
        for k, (group, (pool, train_pool)) in enumerate(groups.items()):
            if spec.max_prompt_chars:
                pool = _short(pool, spec.max_prompt_chars)
                train_pool = _short(train_pool, spec.max_prompt_chars) if train_pool is not None else None
            pool = list(pool)
            rng.shuffle(pool)
            val = pool[:wanted["validation"][k]]
            rest = pool[len(val):] if train_pool is None else rng.sample(train_pool, len(train_pool))
            tr = rest[:wanted["train"][k]]
            for split, items, rows in (("validation", val, validation), ("train", tr, train)):
                rows += [example_row(source, group, i) for i in items]
                got[split] += len(items)
                if len(items) < wanted[split][k]:
                    notes.append(f"{source}/{group}: {split} has {len(items)} of the {wanted[split][k]} asked for "
                                 "(the staged file has no more" + (" short prompts" if spec.max_prompt_chars else "")
                                 + ")")
        counts[source] = got
    _add_generated(spec, train, counts, notes)
    return Mixture(train, validation, counts, notes)


def _add_generated(spec: MixtureSpec, train: list[dict], counts: dict, notes: list[str]) -> None:
    """Appends `spec.generated_*` rows of our generators to `train` (module docstring)."""
    from reasoner.data.cedar_generators import crypto_records, list_function_records

    crypto = _shares(spec.generated_crypto, 2)
    batches = [("crypto", "generated_caesar", crypto_records("caesar", n=crypto[0], seed=spec.seed)),
               ("crypto", "generated_atbash", crypto_records("atbash", n=crypto[1], seed=spec.seed)),
               ("list_functions", "generated", list_function_records(n=spec.generated_list_functions,
                                                                     seed=spec.seed))]
    for source, group, rows in batches:
        if not rows:
            continue
        # The verifier's record is the inverse of the row's gold fields: the same `tests` load_records would read.
        items = [_Item(row, record_of({"source": source, "id": row.get("id", row.get("index")), "tests": row["test"]}),
                       training_messages(source, row)) for row in rows]
        kept = _short(items, spec.max_prompt_chars) if spec.max_prompt_chars else items
        if len(kept) < len(items):
            notes.append(f"{source}/{group}: {len(items) - len(kept)} generated rows dropped (prompt over "
                         f"{spec.max_prompt_chars} chars)")
        train += [example_row(source, group, i) for i in kept]
        got = counts.setdefault(source, {"train": 0, "validation": 0})
        got["train"] += len(kept)
        got["generated"] = got.get("generated", 0) + len(kept)


def write_mixture(mixture: Mixture, *, out_dir, spec: MixtureSpec | None = None) -> dict[str, str]:
    """Writes train.jsonl, validation.jsonl (what `configs/grpo_cedar.py`'s `data.path` reads) and mixture.json
    (counts, notes, spec); returns the paths."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"train": str(write_jsonl(out / "train.jsonl", mixture.train)),
             "validation": str(write_jsonl(out / "validation.jsonl", mixture.validation))}
    summary = {"counts": mixture.counts, "notes": mixture.notes,
               "spec": dataclasses.asdict(spec) if spec is not None else None}
    (out / "mixture.json").write_text(json.dumps(summary, indent=1))
    paths["summary"] = str(out / "mixture.json")
    return paths
