"""Sequent-Prover end to end (`reasoner demo smt`): teacher trajectories -> curation -> SFT -> student rollouts ->
curation -> DPO -> K-sample evaluation of base, SFT and SFT+DPO (`reasoner.pipelines.smt`).

Variants:
  None / "cpu": the embedded SmolLM2-135M-Instruct, sized for <= 20 minutes on a 2-core CPU: ProofWriter (OWA,
    depth 5) problems from `../shared/data` whose theory has at most 340 characters (12 train, 4 held-out), so that
    the teacher's first turn (its SMT-LIB script in a `z3_solve` call: 616-728 SmolLM2 tokens on these problems)
    fits one turn of 768 new tokens (ProntoQA's scripts alone take 700-1,050 tokens, so ProntoQA is left to the
    `paper` variant); the symbolic teacher (Z3-checked trajectories; `--teacher-endpoint URL` uses a served model
    instead), SFT on the Gold traces (1280-token rows: the traces take 1,050-1,210; two epochs), 2 student samples
    on 6 of the train problems, DPO with 1 pair per problem (Silver hard negatives first), K = 4 evaluation with at
    most 2 turns of 768 new tokens. Learning rates are CPU-sized (a 135M model on a dozen traces needs a larger
    step than the paper's 4B-27B models on 14k). Decoding dominates on a CPU (a turn of 640 tokens for 24 rows
    took 4 minutes on 2 cores), which sets these sizes.
  "paper": the paper's recipes (App. C: configs/sft_smt.py:paper, configs/dpo_smt.py:paper), K = 4 and T_max = 10,
    every problem of the two sets; set model.name to the base checkpoint (the paper's are Qwen3.5/3.6 4B-27B).
  "tiny": a random 2-layer model with SmolLM2's tokenizer and a handful of problems, for tests.
"""

import pathlib

import ml_collections

from configs import common, dpo_smt, sft_smt

SHARED_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"


def get_config(variant=None) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.pipeline = "smt"  # what `reasoner train` / `reasoner demo smt` start with this config
    c.seed = 0
    c.single_device = True  # on a CPU the simulated devices split the same cores and only add collectives
    c.mesh = "fsdp=-1"
    c.model = common.model()
    # per dataset: held-out first, then train, among the problems whose context has at most max_context_chars
    # characters (0: all)
    c.data = ml_collections.ConfigDict(dict(data_root=str(SHARED_DATA), datasets=("proofwriter",), train=12, test=4,
                                            max_context_chars=340))
    c.teacher = ml_collections.ConfigDict(dict(endpoint="", model="teacher", temperature=0.7, samples=1, retries=4))
    # the student samples its first `problems` training problems (0: all)
    c.student = ml_collections.ConfigDict(dict(samples=2, temperature=1.0, max_pairs_per_problem=1, problems=6))
    c.rollout = ml_collections.ConfigDict(dict(max_new_tokens=768, t_max=2, max_len=2048, problems_per_batch=12,
                                               z3_timeout_s=10.0, z3_workers=2))
    c.log = common.log()  # metric writers (log.writers) of every trainer the demo runs
    c.eval = ml_collections.ConfigDict(dict(k=4, temperature=0.7, top_p=1.0))
    sft = sft_smt.get_config(None)
    c.sft = ml_collections.ConfigDict(dict(enabled=True, data=sft.data, optim=sft.optim, train=sft.train,
                                           lora=sft.lora))
    c.sft.data.seq_len = 1280
    c.sft.optim.lr = 1e-4
    c.sft.train.update(dict(batch_size=2, grad_accum=1, num_epochs=2, checkpoint_every=1000))
    dpo = dpo_smt.get_config(None)
    c.dpo = ml_collections.ConfigDict(dict(enabled=True, data=dpo.data, dpo=dpo.dpo, optim=dpo.optim,
                                           train=dpo.train, lora=dpo.lora))
    # A step holds 2 pairs = 4 sequences: without rematerialised layers it kept every layer's activations of four
    # 2048-token sequences for the backward pass, and the 2-core demo peaked at 23.1 GB resident (17.3 GB with
    # remat and 1536-token rows). Student traces that run past 1536 tokens (both turns near 768) are dropped and
    # counted.
    c.dpo.model = ml_collections.ConfigDict(dict(remat=True))
    c.dpo.data.seq_len = 1536
    c.dpo.optim.lr = 5e-6
    c.dpo.train.update(dict(batch_size=2, grad_accum=1, num_epochs=1, checkpoint_every=1000))
    if variant in (None, "cpu"):
        return c
    if variant == "paper":
        for section, paper in (("sft", sft_smt.get_config("paper")), ("dpo", dpo_smt.get_config("paper"))):
            for key in ("data", "optim", "train"):
                c[section][key] = paper[key]
        c.model = sft_smt.get_config("paper").model
        c.data.update(dict(datasets=("prontoqa", "proofwriter"), train=0, test=100,
                           max_context_chars=0))  # train 0 = every remaining problem
        c.student.problems = 0
        c.teacher.samples = 4
        c.student.samples = 4
        c.rollout.update(dict(max_new_tokens=4096, t_max=10, max_len=32768, problems_per_batch=32,
                              z3_timeout_s=30.0))
        return c
    if variant == "tiny":
        c.model.name = ""
        c.model.tokenizer = "smollm2-135m-instruct"
        c.data.update(dict(datasets=("prontoqa", "proofwriter"), train=2, test=1, max_context_chars=0))
        c.sft.data.seq_len = c.dpo.data.seq_len = 2048  # ProntoQA's traces take up to ~1,700 tokens
        c.rollout.update(dict(max_new_tokens=16, t_max=2, max_len=2560, problems_per_batch=4))
        c.eval.k = 2
        c.student.samples = 1
        c.sft.optim.lr = 3e-3
        c.sft.train.num_epochs = 1
        c.dpo.optim.lr = 3e-3
        return c
    raise ValueError(f"unknown variant {variant!r}; expected one of None, cpu, paper, tiny")
