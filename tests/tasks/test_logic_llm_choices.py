"""Five- and seven-way Logic-LLM sets (AR-LSAT, LogicalDeduction) on the real staged records, any-file loading."""

import json
import re

import pytest

from reasoner.tasks.logic_llm import FILES, check_correct, extract_answer, load_file, load_problems, strip_think


@pytest.mark.parametrize("dataset", sorted(FILES))
def test_every_record_loads_and_its_gold_letter_or_text_is_correct(shared_data, dataset):
    problems = load_problems(shared_data, dataset)
    expected = {"proofwriter": 600, "folio": 204, "prontoqa": 500, "arlsat": 230, "logicaldeduction": 300}[dataset]
    assert len(problems) == expected
    for p in problems:
        letters = list(p.labels)
        assert p.answer in letters
        assert check_correct(p.answer, p) and check_correct(f"The answer is ({p.answer}).", p)
        wrong = next(x for x in letters if x != p.answer)
        assert not check_correct(wrong, p) and not check_correct(f"Answer: {wrong}", p)
        if dataset in ("arlsat", "logicaldeduction"):
            gold_text = next(o for o in p.options if o.startswith(p.answer + ")")).partition(")")[2]
            wrong_text = next(o for o in p.options if o.startswith(wrong + ")")).partition(")")[2]
            assert check_correct(f"So: {gold_text}", p), (p.id, gold_text)
            assert not check_correct(f"So: {wrong_text}", p), (p.id, wrong_text)


def test_option_counts_of_the_choice_sets(shared_data):
    assert {len(p.options) for p in load_problems(shared_data, "arlsat")} == {5}
    assert {len(p.options) for p in load_problems(shared_data, "logicaldeduction")} == {3, 5, 7}


def test_think_blocks_are_ignored_and_stripping_is_linear():
    assert strip_think("a <think>B</think> c <think>unclosed") == "a   c "
    assert strip_think("<think>" * 200_000) == ""  # one scan: a quadratic lazy regex takes minutes here
    (problem,) = load_file_from([{"id": "x", "context": "c", "question": "q", "options": ["A) True", "B) False"],
                                  "answer": "B"}])
    assert extract_answer("<think>maybe A</think> B", problem) == "B"


def load_file_from(records, tmp=None):
    import pathlib
    import tempfile

    folder = pathlib.Path(tempfile.mkdtemp())
    path = folder / "set.json"
    path.write_text(json.dumps(records))
    return load_file(path)


@pytest.mark.parametrize("records, message", [
    ([{"id": "a", "context": "c", "question": "q", "options": ["A) x"]}], "record a lacks fields ['answer']"),
    ([{"id": "a", "context": "c", "question": "q", "options": ["x", "y"], "answer": "A"}], "not of the form 'A) text'"),
    ([{"id": "a", "context": "c", "question": "q", "options": ["A) x", "B) y"], "answer": "C"}],
     "answer 'C' is not one of the option letters ['A', 'B']"),
    (["not an object"], "record 0: expected an object"),
])
def test_bad_records_name_the_file_and_record(records, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_file_from(records)


def test_jsonl_and_bad_json(tmp_path):
    rec = {"id": "a", "context": "c", "question": "q", "options": ["A) x", "B) y"], "answer": "B"}
    (tmp_path / "s.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(rec) + "\n")
    assert [p.answer for p in load_file(tmp_path / "s.jsonl", dataset="mine")] == ["B", "B"]
    (tmp_path / "bad.json").write_text("[{")
    with pytest.raises(ValueError, match=r"bad.json: not JSON"):
        load_file(tmp_path / "bad.json")
    with pytest.raises(FileNotFoundError, match="no such Logic-LLM file"):
        load_file(tmp_path / "missing.json")


def test_a_lower_case_article_or_echoed_options_are_not_a_choice(shared_data):
    problem = load_problems(shared_data, "proofwriter", limit=1)[0]  # A true, B false, C unknown
    assert extract_answer("My answer is a definite False.", problem) == "B"  # "a" is an article, not option A
    assert extract_answer("A) True\nB) False\nC) Unknown\nThe statement is False.", problem) == "B"
    assert extract_answer("The answer is (b).", problem) == "B" and extract_answer("Answer: C", problem) == "C"


@pytest.mark.parametrize("dataset", sorted(FILES))
def test_bold_and_boxed_letters_score_on_every_record(shared_data, dataset):
    # "The answer is: **B**" (markdown bold, "is" and ":" together) and "\boxed{B}" extracted as None on every record
    for p in load_problems(shared_data, dataset):
        wrong = next(x for x in p.labels if x != p.answer)
        for reply in ("The answer is: **{}**", "\\boxed{{{}}}", "**Answer: {}**", "Thus $\\boxed{{({})}}$."):
            assert check_correct(reply.format(p.answer), p), (p.id, reply)
            assert extract_answer(reply.format(wrong), p) == wrong, (p.id, reply)
    problem = load_problems(shared_data, "proofwriter", limit=1)[0]
    assert extract_answer("(A) is tempting, but \\boxed{C}", problem) == "C"
    assert extract_answer("answer" + " " * 100_000 + "x" + ":" * 100_000, problem) is None
