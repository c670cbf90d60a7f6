"""Test-wide settings: CPU JAX with 8 simulated devices, offline Hugging Face, x64 off; CI strictness.

Under CI (`CI=true`, which `.ci/run`'s caller sets) the suite may not pass by skipping:
- before any test runs, the session stops (exit 3, within seconds) when `../shared/data`, the PyTorch baseline
  (torch, trl, scipy), the sandbox's namespace isolation (`unshare`) or any of its layers (mount/pid/net namespaces,
  uid nobody, rlimits, seccomp, audit hook: `isolation_report()`) is missing, naming what is missing;
- a test that skips anyway is reported as a failure with its skip reason.
Outside CI the same tests skip and say why (`-ra` prints the reasons).

Hypothesis runs under the `ci` profile in CI (derandomized, fixed example counts: reproducible runs) and the `dev`
profile elsewhere; neither has a deadline, since these machines are noisy (speed belongs in `reasoner bench`).
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One persistent compilation cache for the whole run, shared by both xdist workers and every subprocess they start:
# the controller makes a fresh directory at import and the workers it spawns inherit the variable, so each run
# starts cold (a reproducible duration) and programs that repeat across tests (the same tiny configs, every CLI
# test's fresh process) compile once. A tiny model's steps compile in well under JAX's 1 s threshold, so every
# program is cached. A hit is the executable a compile would have built (JAX keys it on program, shardings,
# devices, options and versions). The controller removes the directory at the end.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="reasoner-tests-xla-")
    os.environ["REASONER_TESTS_OWN_XLA_CACHE"] = "1"
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# Compiling is most of the suite's time (hundreds of small programs, each run a few times), so XLA spends less
# effort optimising them (`jax_disable_most_optimizations`: LLVM at -O0, no expensive passes; about 20 % faster
# here). The bounds the tests check are derived for any evaluation order (`tests/tolerances.py`), and the exact
# comparisons compare two runs under the same setting, so neither depends on how XLA optimised a program.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import importlib.util  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

SHARED_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if IN_CI else "dev"))

# What CI must have; each entry: (what is missing, how to get it).
_BASELINE_MODULES = ("torch", "trl", "scipy")


def _namespaces_work() -> bool:
    """Whether the sandbox's isolation layer (`unshare` with net, pid and mount namespaces) runs here."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "--net", "--pid", "--mount", "--fork", "true"],
                              capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ci_missing() -> list[str]:
    """What a CI run needs and this machine lacks, one line each (empty when all is there)."""
    missing = []
    if not SHARED_DATA.is_dir():
        missing.append(f"../shared/data (looked for {SHARED_DATA}): the real public data the tests read in place; "
                       "lay the workspace's shared/ folder beside the checkout")
    for name in _BASELINE_MODULES:
        if importlib.util.find_spec(name) is None:
            missing.append(f"python module {name!r}: install the baseline extra (pip install -e '.[dev,baseline]')")
    if not _namespaces_work():
        missing.append("namespace isolation: `unshare --net --pid --mount --fork true` fails (needs util-linux and "
                       "CAP_SYS_ADMIN); the code sandbox and the Z3 workers rely on it")
    else:
        from reasoner.verifiers.sandbox import isolation_report  # JAX-free: the sandbox never imports it

        absent = [layer for layer, active in isolation_report().items() if not active]
        if absent:
            missing.append(f"sandbox isolation layers {absent} are not active here "
                           "(reasoner.verifiers.sandbox.isolation_report); the sandbox tests would test less")
    return missing


def pytest_unconfigure(config):
    if os.environ.get("REASONER_TESTS_OWN_XLA_CACHE") and not hasattr(config, "workerinput"):  # the controller
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def pytest_configure(config):
    if not IN_CI or hasattr(config, "workerinput"):  # check once, in the controlling process
        return
    missing = ci_missing()
    if missing:
        pytest.exit("CI=true and the suite cannot run complete; missing:\n  - " + "\n  - ".join(missing),
                    returncode=3)


# The `full` tier: tests that `make test` (and so CI) leaves to `make test-all`, each the costlier twin of a test that
# stays in the suite (the reason names it). Kept so that the 2-core suite stays under 20 minutes; run them before a
# release or after changing what they cover.
FULL_TIER = {
    "tests/pipelines/test_cedar_pipeline.py::test_demo_cedar_tiny_end_to_end":
        "test_pipeline_pieces_reward_config_table_and_plot checks the pipeline's pieces and "
        "test_cedar_eval_counts_intervals_and_judged_scores its evaluation stage",
    "tests/data/test_hf_datasets.py::test_first_sft_step_on_a_messages_dataset_has_the_hand_loss":
        "test_sft_loss_on_a_messages_dataset_is_the_nll_of_the_assistant_tokens checks the same loss forward only",
    "tests/test_multiprocess.py::test_grpo_two_processes_train_as_one_job_and_resume_exactly":
        "test_two_processes_train_as_one_job_and_resume_exactly[sft] runs the same loop, launcher and checkpoints "
        "as one two-process job; GRPO adds its rollout, whose cross-process host reads are reasoner.distributed's",
    "tests/test_multiprocess.py::test_two_processes_train_as_one_job_and_resume_exactly[dpo]":
        "the [sft] case runs the same two-process job and resume; DPO's own math is in test_dpo_trl / test_golden",
    "tests/rlot/test_env_sampler.py::test_smollm2_batched_episodes_equal_single_runs":
        "test_batched_sampler_episodes_equal_single_runs checks 16 batched episodes on the tiny model",
    "tests/agents/test_smt_training_chain.py::test_rollouts_feed_sft_and_dpo_training":
        "tests/pipelines/test_smt_pipeline.py runs rollouts -> SFT -> DPO end to end",
    "tests/trainers/test_resume.py::test_resume_after_sigkill_is_exact_and_tiny_run_learns[dpo]":
        "the [sft] case kills and resumes the same run_loop",
    "tests/trainers/test_resume.py::test_resume_after_sigkill_is_exact_and_tiny_run_learns[sft]":
        "test_preemption resumes the same run_loop bit for bit, test_multiprocess[sft] resumes a two-process job "
        "exactly and test_dqn resumes bit for bit; damaged and incompatible checkpoints stay in test_resume",
    "tests/pipelines/test_paper_variants.py::test_paper_variant_starts_its_pipeline[llama1b_proofwriter_sft_true]":
        "test_paper_configs_every_variant resolves every variant; the A* demo test runs the same pipeline's SFT "
        "and GRPO stages from the CLI",
    "tests/trainers/test_preference_losses.py::test_tiny_dpo_steps_orpo_and_simpo":
        "test_orpo_matches_trl and test_simpo_matches_trl_cpo_simpo check the losses the step computes against "
        "TRL's own chain; test_golden_one_step[dpo] runs the DPO trainer's step",
    "tests/pipelines/test_paper_variants.py::test_paper_variant_starts_its_pipeline[llama3b_deeprd_grpo_astar_dependency]":
        "the A* demo test runs SFT then GRPO through the same pipeline; every variant resolves in-process",
    "tests/agents/test_smt_eval_cli.py::test_smollm2_student_k2":
        "the tiny-model smt eval tests cover the command; the real model's sampler is test_sampling_smollm2",
    "tests/sampling/test_sampling_continuation.py::test_continuation_equals_generation_from_concatenated_prompt[1.0]":
        "the [0.0] case checks the same continuation path",
    "tests/trainers/test_sharded.py::test_sharded_losses_equal_single_device[dpo]":
        "the [sft] case shards the same step; test_golden covers DPO's step",
    "tests/models/test_export.py::test_smollm2_export_greedy_decodes_like_our_sampler":
        "the tiny-model export tests (PEFT, merged LoRA) load the same files",
    "tests/test_bench_baseline.py::test_sft_baseline_child_reports_trl_steps_and_the_loss_of_our_batch":
        "a benchmark's child process; `reasoner bench sft` runs it",
    "tests/sampling/test_engine_rollout.py::test_stop_strings_free_the_slot_and_match_the_static_sampler":
        "the static sampler's stop-string tests; the engine's slot refill is in the greedy and EOS tests",
    "tests/sampling/test_engine_rollout.py::test_per_request_budgets_results_in_request_order_and_shared_prompt_blocks":
        "test_serve_engine's own-budget test sends requests with their own budgets through the engine",
    "tests/serve/test_serve_smollm2.py::test_n4_samples_equal_the_samplers":
        "test_serve_engine / test_serve_api check n samples on the tiny model",
    "tests/serve/test_serve_smollm2.py::test_tools_are_rendered_into_the_prompt":
        "test_serve_scripted checks tools and tool_calls end to end",
    "tests/serve/test_serve_smollm2.py::test_sixteen_concurrent_clients_and_a_bad_request":
        "test_serve_api checks sixteen concurrent clients on the tiny model",
    "tests/trainers/test_kto.py::test_tiny_run_learns_and_resumes_exactly_after_preemption":
        "test_first_step_loss_equals_trls_kto_trainer and test_golden_one_step_kto check KTO's step; "
        "test_preemption resumes the same run_loop bit for bit",
    "tests/rlot/test_transfer.py::test_pipeline_evaluates_the_loaded_navigator_with_another_model":
        "test_loaded_navigator_is_the_trained_one loads the same navigator bit for bit; tests/rlot/test_pipeline.py "
        "runs the pipeline's evaluation stage",
    "tests/sampling/test_sampling_smollm2.py::test_speculating_engine_greedy_matches_transformers_and_logprobs_match_forward":
        "test_engine_speculative checks that speculation draws plain decoding's tokens (greedy and sampled, windows, "
        "sessions) and test_sampler_and_engine_greedy_match_transformers plain decoding's on the real model",
    "tests/metrics/test_writers.py::test_grpo_logs_its_sample_completions_table":
        "test_completion_rows_carry_the_reward_registry_values builds the rows from a real reward batch and the "
        "run_loop writer test hands a step's table to the writers",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in FULL_TIER:
            item.add_marker(pytest.mark.full)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI, a skip is a failure (xfail is not a skip and stays as it is)."""
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where every test must run: {reason}"


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """`../shared/data` beside the checkout: real public data, read in place."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer, loaded once per worker."""
    from reasoner.tokenization import load_tokenizer
    from tests.models_shared import smollm2_path

    return load_tokenizer(smollm2_path())


@pytest.fixture(scope="session")
def smollm2():
    """Our SmolLM2 (f32), loaded once per worker and shared by every directory's tests."""
    from reasoner.models import load_model
    from tests.models_shared import smollm2_path

    return load_model(str(smollm2_path()))


# Each compiled XLA:CPU executable holds ~6 memory mappings until it is freed, and a jitted function keeps every
# executable it ever compiled: an xdist worker that runs half the suite in one process reached Linux's 65,530
# mappings (vm.max_map_count) and segfaulted inside `Executable.serialize` (2026-12-02, a fresh-clone CI run at
# 75 %). Past a third of the limit, the in-memory caches are dropped between test modules; programs that come back
# are loaded from the run's persistent compilation cache, not recompiled.
_MAPS_BEFORE_CLEARING = 20_000


def _mappings() -> int:
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux
        return 0


@pytest.fixture(autouse=True, scope="module")
def _bounded_executables():
    yield
    import sys

    if "jax" in sys.modules and (held := _mappings()) > _MAPS_BEFORE_CLEARING:
        import warnings

        sys.modules["jax"].clear_caches()
        warnings.warn(f"{held} memory mappings after this module: jax.clear_caches() (now {_mappings()})",
                      stacklevel=1)
