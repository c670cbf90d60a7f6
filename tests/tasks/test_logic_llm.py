"""Logic-LLM tasks on the real files: loading, labels, prompts, answer extraction and check_correct."""

import collections
import json

import pytest

from reasoner.tasks.logic_llm import (
    check_correct, extract_answer, load_problems, render_messages, render_prompt,
)


@pytest.mark.parametrize("dataset,count,labels", [
    ("proofwriter", 600, {"A": "true", "B": "false", "C": "unknown"}),
    ("folio", 204, {"A": "true", "B": "false", "C": "unknown"}),
    ("prontoqa", 500, {"A": "true", "B": "false"}),
])
def test_load_real_files(shared_data, dataset, count, labels):
    problems = load_problems(shared_data, dataset)
    assert len(problems) == count
    assert all(p.labels == labels for p in problems)
    assert set(collections.Counter(p.answer for p in problems)) <= set(labels)
    first = problems[0]
    prompt = render_prompt(first)
    assert first.context in prompt and first.question in prompt and all(o in prompt for o in first.options)
    assert [m["role"] for m in render_messages(first)] == ["system", "user"]


def test_bad_inputs(shared_data, tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'zebra'"):
        load_problems(shared_data, "zebra")
    (tmp_path / "folio").mkdir()
    (tmp_path / "folio" / "logic_llm_dev.json").write_text(json.dumps([{"id": "x", "context": "c"}]))
    with pytest.raises(ValueError, match=r"record x lacks fields \['answer', 'options', 'question'\]"):
        load_problems(tmp_path, "folio")


@pytest.fixture(scope="module")
def folio(shared_data):
    return {p.id: p for p in load_problems(shared_data, "folio")}


@pytest.mark.parametrize("text,letter", [
    ("B", "B"), ("(C)", "C"), ("c.", "C"), ("B) False", "B"), ("Answer: A", "A"), ("The answer is (B).", "B"),
    ("The statement is uncertain.", "C"), ("Unknown", "C"), ("false", "B"),
    ("<think>maybe true</think> The answer is C", "C"),
    ("It could be true or false", None), ("", None), (None, None), ("D", None),
])
def test_extract_answer(folio, text, letter):
    assert extract_answer(text, folio["FOLIO_dev_163"]) == letter


def test_check_correct_on_real_items(folio, shared_data):
    hawk = folio["FOLIO_dev_163"]  # "All birds land" -> False (B)
    assert check_correct("B", hawk) and check_correct("False", hawk) and not check_correct("A", hawk)
    prontoqa = load_problems(shared_data, "prontoqa", limit=1)[0]
    assert prontoqa.answer == "B" and check_correct("false", prontoqa) and not check_correct("C", prontoqa)
    assert extract_answer("Uncertain", prontoqa) is None  # no such option in ProntoQA
