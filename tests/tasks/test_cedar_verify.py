"""Table 8 verifiers by source: the gold answer scores 1 and a perturbed one 0, on real staged records (and on
fixtures in the published format for the sources we cannot ship), through `reasoner cedar check` too."""

import json
import re
import subprocess
import sys

import pytest

from reasoner.tasks.cedar_verify import answer_span, load_records, record_of, score, uniadilr_gold


def _answer(text):
    return f"<think>reasoning</think><answer>{text}</answer>"


def test_first_answer_span_is_taken_case_insensitively_across_lines():
    assert answer_span("<ANSWER>\n 1 \n</Answer> later <answer>2</answer>") == "1"
    assert answer_span("<answer>unterminated") is None
    assert answer_span("no tags") is None


def test_abductionrules_real(shared_data):
    records = load_records("abductionrules", shared_data / "abductionrules/Abduction-Animal/dev.jsonl")
    first = json.loads((shared_data / "abductionrules/Abduction-Animal/dev.jsonl").open().readline())
    assert records[0].id == first["questions"][0]["id"] and len(records) >= 75
    for path in sorted(shared_data.glob("abductionrules/*/dev.jsonl")):  # every question of every variant
        questions = [q for line in path.open() for q in json.loads(line)["questions"]]
        records = load_records("abductionrules", path)
        assert [r.id for r in records] == [q["id"] for q in questions]
        for r, q in zip(records, questions):
            assert score(r, _answer(f"\n {q['label']} ")) == 1.0
            assert score(r, _answer(q["label"].rstrip("."))) == 0.0  # exact match: the period counts
            assert score(r, _answer(q["text"])) == (q["text"] == q["label"])
    for r in records[:20]:
        assert score(r, _answer("  " + r.gold.upper().replace(" ", "   "))) == 1.0
        words = r.gold.split()
        assert score(r, _answer(" ".join(words[:1] + ["unicorn"] + words[2:]))) == 0.0
        assert score(r, r.gold) == 0.0  # no answer span


def test_uniadilr_real(shared_data):
    """Every staged record: its proof's antecedent ids (read here with a regex of the test's own) in the prompt's
    format ("5,13") score 1 in any order and with duplicates; Table 8 counts STANDALONE integers only, so the same
    ids glued to "sent" or written as a decimal score 0, as does a set with one id changed or missing."""
    path = shared_data / "uniadilr/abduction.jsonl"
    records = load_records("uniadilr", path)
    rows = [json.loads(line) for line in path.open()]
    assert len(records) == len(rows) == 300 and records[7].id == 7
    for r, row in zip(records, rows):
        ids = sorted({int(n) for n in re.findall(r"sent(\d+)", row["proof"].split("->")[0])})
        assert ids and set(r.gold) == set(ids) and all(f"sent{i}" in row["context"] for i in ids)
        assert score(r, _answer(",".join(str(i) for i in ids))) == 1.0
        assert score(r, _answer(" , ".join(str(i) for i in reversed(ids + ids[:1])))) == 1.0
        assert score(r, _answer(", ".join(f"sent{i}" for i in ids))) == 0.0
        assert score(r, _answer(", ".join(str(i) for i in ids[:-1] + [ids[-1] + 1000]))) == 0.0
        if len(ids) > 1:
            assert score(r, _answer(", ".join(str(i) for i in ids[:-1]))) == 0.0
            assert score(r, _answer(".".join(str(i) for i in ids))) == 0.0
    assert uniadilr_gold("sent5 & sent13 -> Sarah is a talented programmer.") == {5, 13}
    (r,) = [r for r in records if r.gold == {5, 13}][:1]
    assert [score(r, _answer(a)) for a in ("5,13", "(13) and (5)", "13, 5, 5", "sent5,sent13", "5, s13", "5.13",
                                           "5, 13x", "5, 0013", "5", "5, 13, 1")] == [1, 1, 1, 0, 0, 0, 0, 1, 0, 0]


def test_list_functions_real_run_in_the_sandbox(shared_data):
    path = shared_data / "list_functions/list_functions.jsonl"
    rows = [json.loads(line) for line in path.open()][:2]
    records = load_records("list_functions", path)[:2]
    for r, row in zip(records, rows):
        assert r.id == row["id"] and len(r.tests) == 10
        gold = f"```python\n{row['function']}\ntransform = {row['id']}\n```"
        assert score(r, _answer(gold)) == 1.0
        wrong = f"{row['function']}\ndef transform(x):\n    return {row['id']}(x) + [0]\n"
        assert score(r, _answer(wrong)) == 0.0


def test_code_answers_stop_at_the_first_failing_test(shared_data, monkeypatch):
    """Table 8 rewards an answer only when all tests pass, so the first failing test decides and the rest are not
    run: a hanging answer costs one 5 s timeout, not ten. The sandbox calls are counted (not timed); the gold
    function still runs all ten tests and scores 1."""
    import reasoner.verifiers.sandbox as sandbox

    path = shared_data / "list_functions/list_functions.jsonl"
    row = json.loads(path.open().readline())
    record = load_records("list_functions", path)[0]
    ran, run = [], sandbox.run_transform_tests

    def counting(code, tests, **kwargs):
        ran.extend(tests)
        return run(code, tests, **kwargs)

    monkeypatch.setattr(sandbox, "run_transform_tests", counting)
    gold = f"{row['function']}\ntransform = {row['id']}\n"
    first3 = [t["input"] for t in row["test"][:3]]
    assert all(t["input"] not in first3 for t in row["test"][3:])
    right_then_wrong = f"{row['function']}\ndef transform(x):\n    return {row['id']}(x) if x in {first3!r} else [-1]\n"
    for answer, reward, tests_run in ((gold, 1.0, 10), ("def transform(x):\n    return [-1]\n", 0.0, 1),
                                      (right_then_wrong, 0.0, 4), ("def transform(x):\n    raise ValueError\n", 0.0, 1)):
        ran.clear()
        assert score(record, _answer(answer)) == reward
        assert ran == [(t["input"], t["output"]) for t in row["test"][:tests_run]]


CAESAR = "def transform(s):\n    return ''.join(chr((ord(c) - b + {k}) % 26 + b) if c.isalpha() else c for c in s " \
         "for b in [65 if c.isupper() else 97])\n"
ATBASH = "def transform(s):\n    return ''.join(chr(25 - (ord(c) - b) + b) if c.isalpha() else c for c in s " \
         "for b in [65 if c.isupper() else 97])\n"


@pytest.mark.parametrize("name", ["caesar", "atbash"])
def test_crypto_real_run_in_the_sandbox(shared_data, name):
    path = shared_data / f"crypto/{name}.jsonl"
    row = json.loads(path.open().readline())
    record = load_records("crypto", path)[0]
    assert record.id == row["index"] and record.tests
    if name == "caesar":
        demo = row["train"]["normal"][0]
        k = (ord(demo["output"][0].lower()) - ord(demo["input"][0].lower())) % 26
        code = CAESAR.format(k=k)
    else:
        code = ATBASH
    assert score(record, _answer(code)) == 1.0
    assert score(record, _answer(code.replace("return ''.join", "return 'x' + ''.join"))) == 0.0


def test_unshippable_sources_on_published_format_fixtures(tmp_path):
    copa = tmp_path / "balanced_copa.jsonl"
    copa.write_text("\n".join(json.dumps(r) for r in [
        {"id": 1, "premise": "The man broke his toe.", "choice1": "He dropped a hammer on his foot.",
         "choice2": "He got a hole in his sock.", "question": "cause", "label": 0, "mirrored": False},
        {"id": 2, "premise": "I tipped the bottle.", "choice1": "The liquid froze.", "choice2": "The liquid poured.",
         "question": "effect", "label": 1, "mirrored": False}]) + "\n")
    a, b = load_records("balanced_copa", copa)
    assert (a.gold, b.gold) == (1, 2)
    assert (score(a, _answer("1")), score(a, _answer("2")), score(b, _answer(" 2 ")), score(b, _answer("1"))) == (
        1.0, 0.0, 1.0, 0.0)
    fever = tmp_path / "climate_fever.jsonl"
    fever.write_text("\n".join(json.dumps({"claim_id": str(i), "claim": "c", "claim_label": label, "evidences": []})
                               for i, label in enumerate([0, 1, 2, 3, "NOT_ENOUGH_INFO"])) + "\n")
    records = load_records("climate_fever", fever)
    assert [r.gold for r in records] == ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO", "DISPUTED", "NOT ENOUGH INFO"]
    assert [score(r, _answer(r.gold.lower())) for r in records] == [1.0] * 5
    assert [score(r, _answer("SUPPORTS" if r.gold != "SUPPORTS" else "REFUTES")) for r in records] == [0.0] * 5
    logics = tmp_path / "causelogics.jsonl"
    logics.write_text(json.dumps({"Premises": "p", "Rules": "r", "Phenomenon": "x", "Possible Cause": "c",
                                  "Label": "True"}) + "\n")
    (r,) = load_records("causelogics", logics)
    assert (r.id, score(r, _answer("true")), score(r, _answer("FALSE"))) == (0, 1.0, 0.0)


def test_bad_records_are_clear_errors(tmp_path):
    bad = tmp_path / "copa.jsonl"
    bad.write_text(json.dumps({"id": 1, "label": 5}) + "\n")
    with pytest.raises(ValueError, match="label 5, expected 0 or 1"):
        load_records("balanced_copa", bad)
    with pytest.raises(ValueError, match="source 'copa'"):
        load_records("copa", bad)
    bad.write_text(json.dumps({"id": 1, "label": True}) + "\n")  # JSON true is no label (True == 1 in Python)
    with pytest.raises(ValueError, match="label True, expected 0 or 1"):
        load_records("balanced_copa", bad)
    bad.write_text(json.dumps({"claim_id": "1", "claim_label": True}) + "\n")
    with pytest.raises(ValueError, match="claim_label True, expected 0-3"):
        load_records("climate_fever", bad)


def test_malformed_records_name_the_line_and_what_was_expected(tmp_path):
    bad = tmp_path / "crypto.jsonl"
    bad.write_text(json.dumps({"train": {"normal": []}, "test": [{"input": "ab"}], "index": 0}) + "\n")
    with pytest.raises(ValueError, match=r"crypto.jsonl:1: test\[0\] is .* expected an object with 'input' and"):
        load_records("crypto", bad)
    bad.write_text(json.dumps({"id": "c1", "test": "ab"}) + "\n")
    with pytest.raises(ValueError, match=r"crypto.jsonl:1: 'test' is 'ab', expected a non-empty list"):
        load_records("list_functions", bad)
    bad.write_text(json.dumps({"context": "c", "questions": ["The cat is red."]}) + "\n")
    with pytest.raises(ValueError, match="crypto.jsonl:1: expected a JSON object with field 'id', got str"):
        load_records("abductionrules", bad)
    with pytest.raises(ValueError, match=r"crypto example 3: test\[0\] is \['ab', 'ba'\]"):
        record_of({"source": "crypto", "id": 3, "tests": [["ab", "ba"]]})


def test_example_rows_carry_gold_in_the_type_the_verifier_compares():
    """A row written by hand with the COPA choice as text ("2") scores as the int the mixture writes (it scored 0
    for every completion); a gold that is no choice, or no fact, is refused by name."""
    for answer in (2, "2", " 2"):
        record = record_of({"source": "balanced_copa", "id": 1, "answer": answer})
        assert (score(record, _answer("2")), score(record, _answer("1"))) == (1.0, 0.0)
    for answer in ("two", True, 3, 2.5, None):
        with pytest.raises(ValueError, match="balanced_copa example 1: answer .* is not the choice 1 or 2"):
            record_of({"source": "balanced_copa", "id": 1, "answer": answer})
    with pytest.raises(ValueError, match="abductionrules example 4: answer 7 is not the missing fact"):
        record_of({"source": "abductionrules", "id": 4, "answer": 7})
    record = record_of({"source": "causelogics", "id": 5, "answer": " true "})
    assert (score(record, _answer("TRUE")), score(record, _answer("false"))) == (1.0, 0.0)


def test_cli_prints_one_reward_per_completion_in_order(shared_data, tmp_path):
    path = shared_data / "uniadilr/abduction.jsonl"
    records = load_records("uniadilr", path)[:3]
    lines = [{"id": 2, "completion": _answer(",".join(str(i) for i in records[2].gold))},
             {"id": 0, "completion": "no span"},
             {"id": 1, "completion": _answer(" ".join(str(i) for i in records[1].gold))}]
    completions = tmp_path / "c.jsonl"
    completions.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    cmd = [sys.executable, "-m", "reasoner.cli", "cedar", "check", "--source", "uniadilr", "--input", str(path),
           "--completions", str(completions), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert [json.loads(x) for x in out.stdout.splitlines()] == [{"id": 2, "reward": 1.0}, {"id": 0, "reward": 0.0},
                                                               {"id": 1, "reward": 1.0}]
    completions.write_text(json.dumps({"id": 99999, "completion": "x"}) + "\n")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "id 99999 is not a record" in out.stderr


def test_check_refuses_records_that_share_an_id(tmp_path, capsys):
    from reasoner.cli import main

    logics = tmp_path / "causelogics.jsonl"
    logics.write_text("".join(json.dumps({"id": "a", "Label": label}) + "\n" for label in ("TRUE", "FALSE")))
    completions = tmp_path / "c.jsonl"
    completions.write_text(json.dumps({"id": "a", "completion": _answer("FALSE")}) + "\n")
    assert main(["cedar", "check", "--source", "causelogics", "--input", str(logics), "--completions",
                 str(completions), "--json"]) == 2
    assert "id 'a' names more than one record" in capsys.readouterr().err
