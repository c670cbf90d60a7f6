"""LLM judges for CEDAR-GRPO's process rewards: evidence coverage (Eq. 6) and directionality (Eq. 7).

`parse_judgement(kind, text)` reads a judge reply (`parse`); `prompts` holds the paper's App. D.4 rubric prompts;
`judge` has the `Judge` interface (in-process sampler, OpenAI-compatible endpoint) and `score_traces`, which never
raises for a bad or missing reply: it scores 0 and counts it; `cache` has the on-disk cache (`CachedJudge`).
"""

from reasoner.judges.cache import CachedJudge
from reasoner.judges.judge import (EndpointJudge, Judge, JudgeCounters, SamplerJudge, judge_messages, score_traces,
                                   think_span)
from reasoner.judges.parse import DIRECTIONALITY_LEVELS, KINDS, Judgement, parse_judgement

__all__ = ["DIRECTIONALITY_LEVELS", "KINDS", "CachedJudge", "EndpointJudge", "Judge", "JudgeCounters", "Judgement",
           "SamplerJudge", "judge_messages", "parse_judgement", "score_traces", "think_span"]
