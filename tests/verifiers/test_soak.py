"""A short soak through both pools: every call gets the outcome its kind must give, nothing leaks."""

import argparse
import json

import pytest

from reasoner.benchmarks.verifier_soak import MIX, plan, run_soak
from reasoner.verifiers.sandbox import unshare_works


def test_plan_has_every_kind_in_its_share():
    kinds = plan(1000, seed=3)
    assert len(kinds) == 1000 and plan(1000, seed=3) == kinds
    for kind, share in MIX.items():
        assert kinds.count(kind) == round(share * 1000), kind


@pytest.mark.skipif(not unshare_works(), reason="the soak's code payloads need the strict sandbox")
def test_short_soak_is_clean(capsys):
    code = run_soak(argparse.Namespace(soak=120, soak_seed=1, workers=2, json=True))
    report = json.loads(capsys.readouterr().out)
    assert (code, report["wrong_outcomes"], report["leaked_processes"]) == (0, {}, 0), json.dumps(report)
    assert report["soak_calls"] == 120 and report["z3_restarts"] == report["kinds"].get("smt_memout", 0)
