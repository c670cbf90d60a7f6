"""Building the RL-of-Thoughts pieces from a `configs/rlot.py` config (shared by the demo and `reasoner train`).

    model, tokenizer = load_model_and_tokenizer(config.demo.model)
    pool, test = split_problems(config)
    env = training_env(config)          # the direct-answer pass over the pool, then ThoughtEnv on the failures
"""

from __future__ import annotations

import functools
import pathlib

from reasoner.tasks.reasoning import load_task


def default_data_root() -> pathlib.Path:
    """`../shared/data` beside the checkout."""
    return pathlib.Path(__file__).resolve().parents[4] / "shared" / "data"


def load_model_and_tokenizer(name: str):
    """The policy model: a preset / .gguf / HF directory, or "random-tiny" (2 layers on SmolLM2's tokenizer)."""
    from reasoner.models.presets import resolve
    from reasoner.tokenization import load_tokenizer

    if name == "random-tiny":
        from flax import nnx

        from reasoner.models import Decoder, ModelConfig

        cfg = ModelConfig(family="llama", vocab_size=49152, hidden_size=32, intermediate_size=64, num_layers=2,
                          num_heads=4, num_kv_heads=2, head_dim=8, tie_embeddings=True, rope_theta=1000.0)
        return Decoder(cfg, rngs=nnx.Rngs(0)), load_tokenizer(resolve("smollm2-135m-instruct"))
    from reasoner.models import load_model

    path = resolve(name)
    return load_model(str(path)), load_tokenizer(path)


PROOF_TASKS = ("proofwriter", "prontoqa")  # tasks whose English theories `ProofContext.from_theory` reads


def data_root(config) -> pathlib.Path:
    return pathlib.Path(config.demo.data_root) if config.demo.data_root else default_data_root()


def split_problems(config):
    """(training pool, held-out test) of `demo.task`. With `env.prm=astar` only problems whose theory parses into
    a logic program are kept (all of the staged ProofWriter and ProntoQA files do)."""
    d = config.demo
    root = data_root(config)
    if d.task == "gsm8k":
        return (load_task(root, "gsm8k", split="train", limit=int(d.train_pool)),
                load_task(root, "gsm8k", split="test", limit=int(d.test)))
    everything = load_task(root, d.task)
    if config.env.prm == "astar":
        contexts = proof_contexts(config)
        everything = [p for p in everything if p.id in contexts]
    test, pool = everything[:int(d.test)], everything[int(d.test):int(d.test) + int(d.train_pool)]
    if not pool:
        raise ValueError(f"demo.task={d.task}: {len(everything)} problems leave none for training after "
                         f"demo.test={d.test}")
    return pool, test


def proof_contexts(config) -> dict:
    """{problem id: `ProofContext`} of the `demo.task` problems whose theory parses (`env.prm=astar`)."""
    task = config.demo.task
    if task not in PROOF_TASKS:
        raise ValueError(f"env.prm=astar: demo.task={task!r} has no logic programs to verify steps against; expected "
                         f"one of {PROOF_TASKS}")
    return _proof_contexts(task, str(data_root(config)))


@functools.lru_cache(maxsize=4)
def _proof_contexts(task: str, root: str) -> dict:
    from reasoner.agents.rlot.prm import ProofContext
    from reasoner.tasks.logic_llm import load_problems

    out = {}
    for p in load_problems(root, task):
        try:
            out[f"{task}/{p.id}"] = ProofContext.from_theory(p.context, theory_id=p.id)
        except ValueError:
            continue  # split_problems leaves such problems out
    return out


def make_prm(config, *, model, tokenizer, problems=()):
    """The PRM `config.env.prm` names; `problems` are those its episodes will run on (the A* PRM needs their
    logic programs). A PRM with a `close()` (the Z3 one owns a verifier pool) is closed by its user."""
    from reasoner.agents.rlot.prm import AStarStepPRM, MathShepherdPRM, OutcomeOnlyPRM, VerifierPRM, arithmetic_check

    e = config.env
    kind = e.prm
    if kind == "outcome":
        return OutcomeOnlyPRM()
    if kind == "verifier":
        return VerifierPRM(arithmetic_check)
    if kind == "math_shepherd":
        if e.prm_model:
            prm_model, prm_tokenizer = load_model_and_tokenizer(e.prm_model)
        else:
            prm_model, prm_tokenizer = model, tokenizer
        return MathShepherdPRM(prm_model, prm_tokenizer, max_len=int(config.demo.max_len))
    if kind == "astar":
        contexts = proof_contexts(config)
        missing = [p.id for p in problems if p.id not in contexts]
        if missing:
            raise ValueError(f"env.prm=astar: no logic program for problem {missing[0]} ({len(missing)} in all); "
                             f"expected problems from split_problems")
        return AStarStepPRM({p.question: contexts[p.id] for p in problems}, unverifiable=float(e.prm_unverifiable))
    if kind == "z3":
        from reasoner.agents.rlot.z3_prm import Z3StepPRM

        return Z3StepPRM(timeout_s=float(e.prm_timeout_s), workers=int(e.prm_workers),
                         unverifiable=float(e.prm_unverifiable))
    raise ValueError(f"env.prm={kind!r}: expected one of {PRMS}")


PRMS = ("outcome", "verifier", "math_shepherd", "astar", "z3")


def env_args(config, *, model, tokenizer, problems=()) -> dict:
    """Keyword arguments of `ThoughtEnv` from `config.env` (the PRM built here, for episodes on `problems`)."""
    e = config.env
    return dict(prm=make_prm(config, model=model, tokenizer=tokenizer, problems=problems), max_depth=int(e.max_depth),
                max_width=int(e.max_width), max_new_tokens=int(e.max_new_tokens),
                eval_max_new_tokens=int(e.eval_max_new_tokens))


def training_env(config, *, log=print):
    """ThoughtEnv over the pool problems the model fails when asked directly (all of the pool if none fail)."""
    from reasoner.agents.rlot import inference
    from reasoner.agents.rlot.env import ThoughtEnv
    from reasoner.agents.rlot.llm import SamplerLM

    d, e = config.demo, config.env
    model, tokenizer = load_model_and_tokenizer(d.model)
    pool, _ = split_problems(config)
    lm = SamplerLM(model, tokenizer, max_new_tokens=int(e.max_new_tokens), max_len=int(d.max_len), seed=int(d.seed))
    screen = inference.direct(lm, pool, max_new_tokens=int(d.direct_max_new_tokens))
    failed = [p for p, ok in zip(pool, screen.correct) if not ok] or list(pool)
    log(f"[rlot] direct pass: {len(pool) - sum(screen.correct)} of {len(pool)} failed -> training problems")
    return ThoughtEnv(lm, failed, **env_args(config, model=model, tokenizer=tokenizer, problems=failed))


def batch_line(b: int, record: dict) -> str:
    """The progress line of one batch of navigator training (the demo's and `reasoner train`'s): the mean return
    (an episode's sum of rewards) and the mean reward per step (the authors' "Reward"; `trainers.dqn.train_dqn`)."""
    return (f"batch {b}: episodes {record['episodes']}, mean return {record['mean_return']:.3f}, "
            f"mean reward per step {record['mean_step_reward']:.3f}, loss {record['loss']:.4f}, "
            f"epsilon {record['epsilon']:.3f}")
