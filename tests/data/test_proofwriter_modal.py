"""ProofWriter's Birds theories (modal "can" / "cannot"): parsed, proved by A*, verbalized and parsed back."""

from reasoner.data.proofwriter_english import parse_sentence, parse_statement, parse_theory_text
from reasoner.data.solving import decide
from search.logic import Atom, Rule
from search.verbalize import make_verbalizer

# The Birds rule base of ProofWriter (Tafjord et al., 2021; the "birds" theories of its release), in its sentences.
BIRDS = (
    "Arthur is a bird. Arthur is not wounded. Bill is an ostrich. Colin is a bird. Colin is wounded. "
    "Dave is not an ostrich. Dave is wounded. "
    "If someone is an ostrich then they are a bird. If someone is an ostrich then they are abnormal. "
    "If someone is an ostrich then they cannot fly. If someone is a bird and wounded then they are abnormal. "
    "If someone is wounded then they cannot fly. If someone is a bird and not abnormal then they can fly.")


def test_modal_sentences_parse_to_can_atoms():
    assert parse_sentence("Bob can fly.") == Atom("can_fly", ("Bob",))
    assert parse_sentence("Bob cannot fly.") == Atom("not_can_fly", ("Bob",))
    assert parse_sentence("The bald eagle can not fly.") == Atom("not_can_fly", ("the bald eagle",))
    rule = parse_sentence("If someone is a bird and not abnormal then they can fly.", name="r")
    assert rule == Rule((Atom("bird", ("?x",)), Atom("not_abnormal", ("?x",))), Atom("can_fly", ("?x",)), "r")
    assert parse_sentence("If someone is wounded then they cannot fly.", name="r").conclusion == Atom(
        "not_can_fly", ("?x",))


def test_birds_theory_parses_whole_and_astar_decides_it():
    program, failures = parse_theory_text(BIRDS, theory_id="birds")
    assert failures == [] and len(program.rules) == 6
    # Bill is an ostrich: he cannot fly (depth 1); Colin and Dave are wounded: they cannot fly (depth 1); Arthur: no
    # rule concludes "not abnormal" under the open world, so neither "Arthur can fly" nor its negation is provable.
    for statement, proved, negation_proved, depth in [
            ("Bill cannot fly.", True, False, 1), ("Colin cannot fly.", True, False, 1),
            ("Dave cannot fly.", True, False, 1), ("Colin is abnormal.", True, False, 1),
            ("Bill can fly.", False, True, None), ("Arthur can fly.", False, False, None)]:
        d = decide(program, parse_statement(statement))
        assert (d.proved, d.negation_proved, d.proved_depth) == (proved, negation_proved, depth), statement


def test_modal_atoms_verbalize_and_parse_back():
    program, _ = parse_theory_text(BIRDS + " If someone can fly then they are happy.")
    v = make_verbalizer(program, dataset="proofwriter")
    for atom, text in [(Atom("can_fly", ("Arthur",)), "Arthur can fly"),
                       (Atom("not_can_fly", ("Bill",)), "Bill cannot fly")]:
        assert v.atom(atom) == text
        assert v.parse_atom(text + ".") == atom
    assert v.parse_atom("Bill can not fly") == Atom("not_can_fly", ("Bill",))


def test_raw_release_can_triples_are_modal_atoms():
    from reasoner.data.proofwriter_atoms import literal_atom

    assert literal_atom("Arthur", "can", "fly", positive=True) == parse_sentence("Arthur can fly.")
    assert literal_atom("the bald eagle", "can", "fly", positive=False) == parse_sentence("The bald eagle cannot fly.")
