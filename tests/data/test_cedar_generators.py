"""Our Crypto and ListFunction generators (`reasoner.data.cedar_generators`): every demonstration agrees with the
hidden rule recomputed here independently (a translate table built in the test for the ciphers, the record's own
`function` text executed for lists), noise pairs disagree in exactly the stated number, the record shape is the
staged files', generated records score through the project's loader and `reasoner cedar check` (gold 1, a
perturbed answer 0), the same seed gives the same records, and the mixture adds them to the training split."""

import json
import string

import pytest

from reasoner.cli import main
from reasoner.data.cedar_generators import (ROUTINE_NAMES, ROUTINES, Counts, crypto_records, function_source,
                                            list_function_records)
from reasoner.data.cedar_mixture import MixtureSpec, build_mixture
from reasoner.tasks.cedar_verify import load_records, record_of, score

LOW, UP = string.ascii_lowercase, string.ascii_uppercase
CAESAR = ("def transform(s):\n    return ''.join(chr((ord(c) - b + {k}) % 26 + b) if c.isalpha() else c for c in s "
          "for b in [65 if c.isupper() else 97])\n")
ATBASH = ("def transform(s):\n    return ''.join(chr(25 - (ord(c) - b) + b) if c.isalpha() else c for c in s "
          "for b in [65 if c.isupper() else 97])\n")


def _reference_cipher(kind, shift):
    """The cipher as a translate table written here (not the generator's)."""
    if kind == "atbash":
        return str.maketrans(LOW + UP, "".join(reversed(LOW)) + "".join(reversed(UP)))
    rot = {c: LOW[(i + shift) % 26] for i, c in enumerate(LOW)} | {c: UP[(i + shift) % 26] for i, c in enumerate(UP)}
    return str.maketrans(rot)


def _shape(record, *, name_key):
    return (sorted(record), sorted(record["train"]), name_key in record,
            {k: len(v) for k, v in record["train"].items()}, len(record["test"]))


def _answer(text):
    return f"<think>from the examples</think><answer>{text}</answer>"


@pytest.mark.parametrize("kind", ["caesar", "atbash"])
def test_crypto_demonstrations_follow_the_cipher(kind, shared_data):
    staged = json.loads((shared_data / f"crypto/{kind}.jsonl").read_text().splitlines()[0])
    records = crypto_records(kind, n=30, seed=3)
    assert [r["index"] for r in records] == list(range(30))
    shifts = set()
    for r in records:
        assert _shape(r, name_key="index") == _shape(staged, name_key="index")  # 10 / 5 / 5 / 10, same fields
        first = r["train"]["normal"][0]
        shift = (ord(first["output"][0].lower()) - ord(first["input"][0].lower())) % 26 if kind == "caesar" else 0
        shifts.add(shift)
        table = _reference_cipher(kind, shift)
        clean = r["train"]["normal"] + r["train"]["ood"] + r["test"]
        assert all(p["output"] == p["input"].translate(table) for p in clean)
        noisy = [p for p in r["train"]["noise"] if p["output"] != p["input"].translate(table)]
        assert len(noisy) == len(r["train"]["noise"]) == 5  # every noise pair is off the cipher
        assert all(len(p["output"]) == len(p["input"]) and p["output"].isalpha() for p in r["train"]["noise"])
        inputs = [p["input"] for p in clean + r["train"]["noise"]]
        assert len(set(inputs)) == len(inputs) and all(4 <= len(w) <= 10 and w.isalpha() for w in inputs)
    assert shifts <= ({1, 2, 3, 4, 5} if kind == "caesar" else {0}) and len(shifts) == (5 if kind == "caesar" else 1)


def test_list_functions_follow_their_hidden_function(shared_data):
    staged = json.loads((shared_data / "list_functions/list_functions.jsonl").read_text().splitlines()[0])
    records = list_function_records(n=60, seed=5)
    assert [r["id"] for r in records] == [f"g{k:03d}" for k in range(60)]
    for r in records:
        assert _shape(r, name_key="id") == _shape(staged, name_key="id")  # 10 / 0 / 5 / 10, same fields
        namespace = {}
        exec(r["function"], namespace)  # the record's own text is the reference
        fn = namespace[r["id"]]
        assert r["function"].startswith(f"def {r['id']}(x):\n    # ")
        clean = r["train"]["normal"] + r["test"]
        assert all(p["output"] == fn(list(p["input"])) for p in clean)
        assert len({json.dumps(p["output"]) for p in clean}) > 1  # not a constant rule
        assert sum(p["output"] != fn(list(p["input"])) for p in r["train"]["noise"]) == 5
        for p in clean + r["train"]["noise"]:
            assert all(type(v) is int for v in p["input"] + p["output"]) and 3 <= len(p["input"]) <= 8
    assert len({r["function"].splitlines()[1] for r in records}) > 15  # many routines drawn, not a few


def test_same_seed_same_records_other_seed_others():
    assert crypto_records("caesar", n=5, seed=1) == crypto_records("caesar", n=5, seed=1)
    assert crypto_records("caesar", n=5, seed=1) != crypto_records("caesar", n=5, seed=2)
    assert list_function_records(n=5, seed=1) == list_function_records(n=5, seed=1)
    assert list_function_records(n=5, seed=1) != list_function_records(n=5, seed=2)
    # The first records do not depend on how many are asked for.
    assert list_function_records(n=8, seed=1)[:5] == list_function_records(n=5, seed=1)


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _check(source, records_path, completions, tmp_path, capsys):
    """`reasoner cedar check --json` rewards for {id: completion}."""
    comp = _write(tmp_path / f"{source}_completions.jsonl", [{"id": i, "completion": c} for i, c in completions])
    capsys.readouterr()
    assert main(["cedar", "check", "--source", source, "--input", records_path, "--completions", comp, "--json"]) == 0
    return [json.loads(x)["reward"] for x in capsys.readouterr().out.splitlines()]


def test_generated_records_score_through_loader_and_check(tmp_path, capsys):
    caesar = crypto_records("caesar", n=2, seed=7)
    atbash = crypto_records("atbash", n=1, seed=7)
    for kind, rows in (("caesar", caesar), ("atbash", atbash)):
        path = _write(tmp_path / f"{kind}.jsonl", rows)
        records = load_records("crypto", path)
        assert [r.id for r in records] == [r["index"] for r in rows]
        assert [list(map(list, r.tests)) for r in records] == [[[t["input"], t["output"]] for t in r["test"]]
                                                               for r in rows]
        completions = []
        for r in rows:
            demo = r["train"]["normal"][0]
            k = (ord(demo["output"][0].lower()) - ord(demo["input"][0].lower())) % 26
            gold = CAESAR.format(k=k) if kind == "caesar" else ATBASH
            wrong = CAESAR.format(k=k + 1) if kind == "caesar" else CAESAR.format(k=1)
            completions += [(r["index"], _answer(gold)), (r["index"], _answer(wrong))]
        assert _check("crypto", path, completions, tmp_path, capsys) == [1.0, 0.0] * len(rows)
    lists = list_function_records(n=3, seed=7)
    path = _write(tmp_path / "lists.jsonl", lists)
    assert [r.id for r in load_records("list_functions", path)] == [r["id"] for r in lists]
    completions = []
    for r in lists:
        completions += [(r["id"], _answer(f"{r['function']}\ntransform = {r['id']}\n")),
                        (r["id"], _answer(f"{r['function']}\ndef transform(x):\n    return {r['id']}(x) + [1]\n"))]
    assert _check("list_functions", path, completions, tmp_path, capsys) == [1.0, 0.0] * len(lists)


def test_mixture_adds_generated_training_rows(shared_data, tmp_path, capsys):
    spec = MixtureSpec(scale=0.0125, validation_scale=0.0, sources=("crypto", "list_functions"), seed=4,
                       generated_crypto=5, generated_list_functions=3)
    mixture = build_mixture(spec, data_dir=shared_data)
    groups = [r["group"] for r in mixture.train]
    # 160 x 0.0125 = 2 staged rows per source (one per cipher), then ours: 3 Caesar + 2 Atbash, 3 lists.
    assert groups.count("caesar") + groups.count("atbash") == 2 and groups.count("all") == 2
    assert (groups.count("generated_caesar"), groups.count("generated_atbash"), groups.count("generated")) == (3, 2, 3)
    assert mixture.counts["crypto"] == {"train": 7, "validation": 0, "generated": 5}
    assert mixture.counts["list_functions"] == {"train": 5, "validation": 0, "generated": 3}
    ours = crypto_records("caesar", n=3, seed=4) + crypto_records("atbash", n=2, seed=4)
    rows = [r for r in mixture.train if r["group"].startswith("generated_")]
    assert [r["tests"] for r in rows] == [r["test"] for r in ours]  # the generator's test pairs, in order
    assert rows[0]["uid"] == "crypto/generated_caesar/0" and rows[0]["prompt"][1]["content"].startswith(
        f"Training examples:\nInput: {ours[0]['train']['normal'][0]['input']}\n")
    assert record_of(rows[0]).tests == tuple((t["input"], t["output"]) for t in ours[0]["test"])
    assert main(["cedar", "data", "--data-dir", str(shared_data), "--out", str(tmp_path / "mix"), "--scale", "0",
                 "--sources", "crypto", "--generated-crypto", "2", "--seed", "4"]) == 0
    assert "crypto: train 2 (2 generated), validation 0" in capsys.readouterr().out
    written = [json.loads(x) for x in (tmp_path / "mix/train.jsonl").read_text().splitlines()]
    assert [w["tests"] for w in written] == [r["test"] for r in crypto_records("caesar", n=1, seed=4)
                                              + crypto_records("atbash", n=1, seed=4)]


def test_bad_generator_arguments_are_named():
    with pytest.raises(ValueError, match="cipher 'rot'"):
        crypto_records("rot", n=1, seed=0)
    with pytest.raises(ValueError, match="caesar shifts"):
        crypto_records("caesar", n=1, seed=0, shifts=(26,))
    with pytest.raises(ValueError, match="list routines \\['nope'\\]"):
        list_function_records(n=1, seed=0, routines=("nope",))
    with pytest.raises(ValueError, match="counts.ood=2"):
        list_function_records(n=1, seed=0, counts=Counts(ood=2))
    with pytest.raises(ValueError, match="generator count noise=-1"):
        Counts(noise=-1)
    with pytest.raises(ValueError, match="generated_crypto=-3"):
        MixtureSpec(generated_crypto=-3)
    assert set(ROUTINE_NAMES) >= {"reverse", "sort", "take", "evens", "add"}
    take = next(r for r in ROUTINES if r.name == "take")
    assert function_source("g001", take, 2) == "def g001(x):\n    # keep the first 2 elements\n    return x[:2]\n"
