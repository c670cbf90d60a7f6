"""Held-out loaders (`reasoner.data.cedar_heldout`) on the real staged files: counts equal the READMEs' (and the
records the test counts itself), every gold label is one of the options and equals the gold read here from the raw
record, the checker gives the gold answer 1 and every other option 0, the App. B prompt is the one for the record's
kind, and a missing file names itself and where to download it."""

import json

import pytest

from reasoner.data.cedar_heldout import HELDOUT, heldout_names, load_heldout, score
from reasoner.tasks.cedar_eval_prompts import COPA_EFFECT_SYSTEM, DEFEASIBLE_SYSTEM, MUSR_SYSTEM
from reasoner.tasks.cedar_prompts import SYSTEM


def _answer(text):
    return f"<think>weighing the evidence</think><answer>\n{text}\n</answer>"


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _check_scoring(examples):
    for ex in examples:
        assert ex.gold in ex.options and ex.metric == "accuracy"
        assert score(ex, _answer(ex.gold)) == 1.0 and score(ex.row(), _answer(ex.gold.lower())) == 1.0
        assert all(score(ex, _answer(o)) == 0.0 for o in ex.options if o != ex.gold)
        assert score(ex, ex.gold) == 0.0  # no answer span
        assert score(ex, _answer(f"{ex.gold} because")) == 0.0


def test_ecare_counts_gold_prompts(shared_data):
    raw = _lines(shared_data / "ecare/dev.jsonl")
    examples = load_heldout("ecare", data_dir=shared_data)
    assert len(examples) == len(raw) == 300  # ecare/README.md: 300 records
    for ex, r in zip(examples, raw):
        assert (ex.id, ex.options, ex.gold) == (r["index"], ("1", "2"), "12"[r["label"]])
        system, user = ex.messages[0]["content"], ex.messages[1]["content"]
        assert system == (SYSTEM["balanced_copa"] if r["ask-for"] == "cause" else COPA_EFFECT_SYSTEM)
        assert f"Option 1: {r['hypothesis1']}" in user or f"Choice 1: {r['hypothesis1']}" in user
        assert r["premise"] in user and r["hypothesis2"] in user
    assert {ex.messages[0]["content"] for ex in examples} == {SYSTEM["balanced_copa"], COPA_EFFECT_SYSTEM}
    _check_scoring(examples)
    assert score(examples[0], _answer("01" if examples[0].gold == "1" else "02")) == 1.0  # an index, parsed
    assert score(examples[0], _answer("¹")) == 0.0


def test_defeasible_nli_counts_gold_prompts(shared_data):
    raw = _lines(shared_data / "defeasible_nli/defeasible-atomic/test.jsonl")
    assert len(raw) == 300  # defeasible_nli/README.md: 300 records
    kept = [(n, r) for n, r in enumerate(raw) if not r["UpdateTypeImpossible"]]
    examples = load_heldout("defeasible_nli", data_dir=shared_data)
    assert len(examples) == len(kept) == 279  # 21 rows have no update (UpdateTypeImpossible): dropped
    for ex, (n, r) in zip(examples, kept):
        assert ex.id == str(n) and ex.gold == {"strengthener": "STRENGTHENS", "weakener": "WEAKENS"}[r["UpdateType"]]
        assert ex.messages[0]["content"] == DEFEASIBLE_SYSTEM
        assert ex.messages[1]["content"] == (f"Premise:\n{r['Premise']}\nHypothesis:\n{r['Hypothesis']}\nUpdate:\n"
                                             f"{r['Update']}\nDoes this Update STRENGTHEN or WEAKEN the Hypothesis?")
    _check_scoring(examples)


@pytest.mark.parametrize("name,stem,domain,questions", [("musr_murder", "murder_mystery", "murder", 3),
                                                         ("musr_object", "object_placements", "object", 12),
                                                         ("musr_team", "team_allocation", "team", 3)])
def test_musr_counts_gold_prompts(shared_data, name, stem, domain, questions):
    stories = json.loads((shared_data / f"musr/small_{stem}.json").read_text())
    assert len(stories) == 3  # musr/README.md: 3 records per domain
    flat = [(s, q) for s in stories for q in s["questions"]]
    examples = load_heldout(name, data_dir=shared_data)
    assert len(examples) == len(flat) == questions
    for ex, (story, q) in zip(examples, flat):
        assert ex.gold == str(q["answer"]) and ex.options == tuple(map(str, range(len(q["choices"]))))
        user = ex.messages[1]["content"]
        assert ex.messages[0]["content"] == MUSR_SYSTEM[domain] and user.startswith("Context:\n" + story["context"])
        assert f"\n{q['question']}\n0 - {q['choices'][0]}\n1 - {q['choices'][1]}\n" in user
    _check_scoring(examples)


def test_names_missing_files_and_bad_records(shared_data, tmp_path):
    assert heldout_names("ecare, MuSR,musr_team,defnli") == ["ecare", "musr_murder", "musr_object", "musr_team",
                                                               "defeasible_nli"]
    with pytest.raises(ValueError, match="held-out dataset 'art'"):
        heldout_names("art")
    for name in HELDOUT:
        with pytest.raises(FileNotFoundError, match=f"held-out {name}: {tmp_path}/.* not found; download .*github.com"):
            load_heldout(name, data_dir=tmp_path)
    (tmp_path / "ecare").mkdir()
    (tmp_path / "ecare/dev.jsonl").write_text(json.dumps({"premise": "p", "ask-for": "why", "hypothesis1": "a",
                                                          "hypothesis2": "b", "label": 0}) + "\n")
    with pytest.raises(ValueError, match="dev.jsonl:1: ask-for 'why'"):
        load_heldout("ecare", data_dir=tmp_path)
    (tmp_path / "musr").mkdir()
    (tmp_path / "musr/team_allocation.json").write_text(json.dumps(
        [{"context": "c", "questions": [{"question": "q", "choices": ["a", "b"], "answer": 2}]}]))
    with pytest.raises(ValueError, match="story 0 question 0: answer 2 is not an index into 2 choices"):
        load_heldout("musr_team", data_dir=tmp_path)
    # JSON true / false are no labels or indices (Python's True == 1 let them through as choice 2 / index 1), and a
    # float label 1.0 is gold "2" (it was "2.0", which no answer matches).
    (tmp_path / "musr/team_allocation.json").write_text(json.dumps(
        [{"context": "c", "questions": [{"question": "q", "choices": ["a", "b"], "answer": True}]}]))
    with pytest.raises(ValueError, match="story 0 question 0: answer True is not an index into 2 choices"):
        load_heldout("musr_team", data_dir=tmp_path)
    row = {"premise": "p", "ask-for": "cause", "hypothesis1": "a", "hypothesis2": "b"}
    (tmp_path / "ecare/dev.jsonl").write_text(json.dumps({**row, "label": True}) + "\n")
    with pytest.raises(ValueError, match="dev.jsonl:1: ask-for 'cause' / label True, expected"):
        load_heldout("ecare", data_dir=tmp_path)
    (tmp_path / "ecare/dev.jsonl").write_text(json.dumps({**row, "label": 1.0}) + "\n")
    (example,) = load_heldout("ecare", data_dir=tmp_path)
    assert example.gold == "2" and score(example, "<answer>2</answer>") == 1.0
