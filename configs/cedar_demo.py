"""CEDAR-GRPO end to end on the embedded SmolLM2-135M-Instruct (`reasoner demo cedar`, reasoner/pipelines/cedar.py).

Stages: the App. A.1 mixture scaled down from ../shared/data -> greedy eval of the base model (correctness per
source, judged coverage and directionality) -> GRPO with R = l_cor r_cor + l_cov r_cov + l_dir r_dir (the judge:
the embedded model in-process, or `judge.endpoint`) -> eval again -> before/after table, report.json and the reward
components per step (report/cedar_rewards.png).

Variants:
  None / "cpu": sized for <= 20 min on a 2-core CPU. Every judged trace costs a judge prefill of its ~1.5k-token
    rubric prompt, so the run is small: prompts of at most 3,600 characters, one held-out example per source (the
    paper's 80 / 40 validation counts x 0.0125, rounded half up), three GRPO steps of one prompt x G = 4, 64 new
    tokens for the policy, 48 for the judge (a 135M judge rarely writes the rubric's JSON in any budget; invalid
    judgements score 0 and are counted); judge batches of 4 = one step's P x G completions = the held-out set (the
    in-process judge pads a short batch to its batch size, so a larger one only adds padded rows). Its intervals
    are wide: it shows the pipeline runs, not the paper's gains.
  "tiny": a random 2-layer model on SmolLM2's tokenizer as policy and judge, a few short generations (tests).
Weights (lambda_cor, lambda_cov, lambda_dir): `weights`, default CEDAR-GRPO's (1/3 each); configs/grpo_cedar.py
ABLATIONS lists the paper's ablations (e.g. --config.weights.coverage=0 --config.weights.correctness=0.5 ...).
Prompt length: `data.max_prompt_chars` keeps the CPU run's mixture short (a filter at build time, in characters);
`grpo.grpo.max_prompt_tokens` (Table 7's 2048, from configs/grpo_cedar.py) then bounds each prompt in tokens as
TRL does, keeping its last tokens (`grpo.grpo.prompt_overflow=drop` leaves such prompts out instead, counted).
The GRPO stage gets no validation split (the held-out rows are the before/after evaluation's), so it keeps no
`best/` and trains on to its last step.
"""

import ml_collections

from configs import common, grpo_cedar


def base_config() -> ml_collections.ConfigDict:
    g = grpo_cedar.get_config("smollm2")
    c = ml_collections.ConfigDict()
    c.pipeline = "cedar"
    c.seed = 42
    c.single_device = True  # simulated CPU devices split the same cores and only add collectives
    c.mesh = "fsdp=-1"
    c.model = g.model
    # data_dir "" = ../shared/data beside the checkout; user_data_dir: Balanced COPA / CLIMATE-FEVER / CauseLogics
    c.data = ml_collections.ConfigDict(dict(
        data_dir="", user_data_dir="", scale=1.0, validation_scale=1.0, seed=42, max_prompt_chars=0,
        sources=("abductionrules", "uniadilr", "list_functions", "crypto", "balanced_copa", "climate_fever",
                 "causelogics")))
    # endpoint "" = the embedded model (a frozen copy of the base policy) judges in-process
    c.judge = ml_collections.ConfigDict(dict(endpoint="", model="judge", max_new_tokens=512, batch_size=8,
                                             timeout_s=60.0, cache=True))
    c.weights = ml_collections.ConfigDict(dict(zip(("correctness", "coverage", "directionality"),
                                                   grpo_cedar.ABLATIONS["cor_cov_dir"])))
    c.grpo = ml_collections.ConfigDict(dict(grpo=g.grpo, optim=g.optim, train=g.train, lora=g.lora))
    c.log = common.log()  # metric writers (log.writers) of every trainer the demo runs
    c.eval = ml_collections.ConfigDict(dict(max_new_tokens=256, batch_size=8))
    return c


def get_config(variant=None) -> ml_collections.ConfigDict:
    c = base_config()
    if variant == "paper":  # Table 5 counts; the paper's judge is gpt-oss-120b behind `judge.endpoint`
        return c
    if variant in (None, "cpu"):
        return common.update(c, {
            "data.scale": 0.0125, "data.validation_scale": 0.0125, "data.max_prompt_chars": 3600,
            "judge.max_new_tokens": 48, "judge.batch_size": 4,
            "grpo.grpo.prompts_per_step": 1, "grpo.grpo.num_generations": 4, "grpo.grpo.max_new_tokens": 64,
            "grpo.optim.lr": 1e-5, "grpo.train.num_steps": 3, "grpo.train.eval_every": 0,
            "grpo.train.checkpoint_every": 1000, "eval.max_new_tokens": 64, "eval.batch_size": 4})
    if variant == "tiny":
        c = get_config("cpu")
        return common.tiny(c, {
            "data.scale": 0.0125, "data.validation_scale": 0.0125, "data.max_prompt_chars": 2400,
            "judge.max_new_tokens": 4, "judge.batch_size": 4, "grpo.grpo.num_generations": 2,
            "grpo.grpo.max_new_tokens": 6, "grpo.lora.rank": 4, "grpo.lora.alpha": 4.0, "grpo.optim.lr": 1e-3,
            "grpo.train.num_steps": 2, "eval.max_new_tokens": 6, "eval.batch_size": 4})
    raise ValueError(f"configs/cedar_demo.py: unknown variant {variant!r}; expected one of None, cpu, tiny, paper")
