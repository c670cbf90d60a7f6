"""CEDAR-GRPO's training prompts per source (App. B.1.1-B.1.7), transcribed from the paper.

The paper's HTML extraction runs words together ("Youareanexpertin..."); the text below restores the spaces and
line breaks and is otherwise the paper's, word for word. Where the paper shows only a placeholder the filling is
ours, from the source's published fields (the paper does not print how its code renders them):
  UniADILR       {context_str}: one "sentN: text" line per context sentence, in the record's order.
  CauseLogics    {premises_text} / {rules_text}: one item per line (a list field) or the field's text as it is.
  CLIMATE-FEVER  {evidence_text}: one "- evidence" line per item of `evidences` (its `evidence` text).
  AbductionRules {query}: the question's `text` (the observation to explain).
  Crypto, ListFunction {train_prompt}: "Input: ...\\nOutput: ..." per `train["normal"]` demonstration (App. A.1: the
                 out-of-distribution and noisy variants are not used), a blank line between them.

`training_messages(source, row)` -> [system, user] chat messages for one raw row of the source (for AbductionRules
the row is `{"context": ..., "question": {...}}`, one question of a context).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

_FORMAT = ("## Output Format:\nYou MUST provide your answer in the following format:\n<think>\n"
           "[Think step by step here]\n</think>\n<answer>\n{slot}\n</answer>\n")

# The code requirements and formatting rules B.1.6 (Crypto) and B.1.7 (ListFunction) share, word for word.
_CODE_RULES = ("- NO IMPORTS allowed.\n"
               "- NO printing, no input(), no randomness.\n"
               "- Do not hardcode specific training inputs/outputs; generalize the logic.\n")
_STRICT_FORMAT = (
    "STRICT FORMATTING RULES:\n"
    "- Do NOT use markdown code blocks (like ```python) inside the <answer> tags. Just write raw code.\n"
    "- Do NOT repeat the code. Write the function exactly once.\n"
    "- Ensure you close the tag with </answer>.\n"
    "- The <answer> tag must contain ONLY valid Python code, no comments or explanations outside the function.\n"
    "- Do NOT write any text before <think> or after </answer>.")

SYSTEM = {
    "uniadilr": (
        "You are an expert in logical reasoning and abductive inference. Your task is to identify which sentences "
        "from a given context provide the necessary evidence to support or explain a hypothesis.\n"
        "You will be provided with:\n"
        "1. A Context containing multiple numbered sentences (sent1, sent2, sent3, etc.)\n"
        "2. A Hypothesis that needs to be supported or explained\n"
        "Your goal is to identify which sentence(s) from the context, when combined, provide the logical foundation "
        "for the hypothesis through abductive reasoning.\n"
        "## Instructions:\n"
        "1. Carefully read all sentences in the context\n"
        "2. Analyze the hypothesis\n"
        "3. Identify which sentences, when combined, best explain or support the hypothesis\n"
        "4. Consider both direct evidence and logical connections\n"
        "5. Think step by step.\n"
        + _FORMAT.format(slot="[Sentence numbers only, comma-separated. For example: 5,13 or 2,7,9]")
        + "CRITICAL: The answer section must contain ONLY the sentence numbers separated by commas. Do not include "
        "the word \"sent\" or any other text."),
    "balanced_copa": (
        "You are an expert in logical reasoning and abductive inference. Your task is to determine which of two "
        "given choices represents the most plausible cause for a given premise.\n"
        "You will be provided with:\n"
        "1. A Premise describing a situation or event\n"
        "2. Two Choices (Choice 1 and Choice 2)\n"
        "Your goal is to select the choice that best explains WHY the premise happened - identifying the root cause "
        "that led to the described situation.\n"
        "## Instructions:\n"
        "1. Carefully read the premise\n"
        "2. Think step by step to evaluate both choices as potential causes\n"
        "3. Consider common sense, real-world knowledge, and typical causal relationships when making your decision\n"
        "4. Select the choice that represents the most plausible and direct cause\n"
        "5. Think step by step.\n"
        + _FORMAT.format(slot="[Either \"1\" or \"2\" - just the number, nothing else]")
        + "CRITICAL: The answer section must contain ONLY the number 1 or 2. Do not include any other text, "
        "explanation, or punctuation."),
    "causelogics": (
        "You are an expert logician and careful reasoning assistant. Your task is to identify whether a given "
        "Possible Cause, when added to the provided knowledge base, logically entails an observed Phenomenon.\n"
        "You will be provided with:\n"
        "1. A set of Premises (facts)\n"
        "2. A set of Rules (implications)\n"
        "3. An observed Phenomenon\n"
        "4. A Possible Cause (a hypothesis)\n"
        "Your goal is to determine whether the Phenomenon can be logically inferred by forward reasoning using ONLY "
        "the given Premises + Rules (+ the Possible Cause).\n"
        "## Instructions:\n"
        "1. Carefully read all Premises and Rules\n"
        "2. Assume the Possible Cause is added as an additional premise\n"
        "3. Using ONLY the given Premises + Rules (+ the Possible Cause), reason forward\n"
        "4. Decide whether the Phenomenon can be logically inferred\n"
        "- If the Phenomenon can be inferred, the Possible Cause is TRUE\n"
        "- If the Phenomenon cannot be inferred, the Possible Cause is FALSE\n"
        "5. Think step by step.\n"
        + _FORMAT.format(slot="[Output exactly one of these two options: TRUE, FALSE]")
        + "CRITICAL: The answer section must contain ONLY one of these two options: TRUE or FALSE. Do not include "
        "any other text."),
    "climate_fever": (
        "You are an expert climate scientist and professional fact-checker. Your task is to determine whether a set "
        "of provided evidences supports, refutes, disputed or is insufficient to evaluate a specific claim.\n"
        "You will be provided with:\n"
        "1. A specific Claim\n"
        "2. A list of Evidences\n"
        "Your goal is to decide whether the Evidence SUPPORTS or REFUTES or DISPUTED the Claim, or if there is NOT "
        "ENOUGH INFO, and to justify that decision by citing specific parts of the evidence.\n"
        "## Instructions:\n"
        "1. Carefully read the Claim and all provided Evidences\n"
        "2. Determine if the Evidence SUPPORTS or REFUTES or DISPUTED the Claim, or if there is NOT ENOUGH INFO\n"
        "3. Think step by step about how the specific parts of the evidence relate to the claim\n"
        "4. Output the final label\n"
        "5. Think step by step.\n"
        + _FORMAT.format(slot="[Output exactly one of these four options: SUPPORTS, REFUTES, DISPUTED, NOT ENOUGH "
                              "INFO]")
        + "CRITICAL: The answer section must contain ONLY one of these four options: SUPPORTS, REFUTES, DISPUTED, "
        "NOT ENOUGH INFO. Do not include any other text."),
    "abductionrules": (
        "You are an expert in logical reasoning and abductive inference. Your task is to identify the single "
        "missing fact that, when added to a given context, makes a query logically decidable.\n"
        "You will be provided with:\n"
        "1. A Context containing facts and rules\n"
        "2. A Query that is currently not decidable from the context alone\n"
        "Your goal is to infer ONE additional fact that, when combined with the context, allows the query to be "
        "either:\n- proved true, or\n- proved false\n"
        "## Instructions:\n"
        "1. Carefully read all facts and rules in the context\n"
        "2. Analyze the query\n"
        "3. Identify the single missing fact that would make the query decidable\n"
        "4. Prefer a direct, minimal explanation:\n"
        "- Output exactly one fact\n- Do not output a rule\n- Do not output multiple facts\n"
        "- Do not paraphrase beyond the style already used in the context\n"
        "5. The fact should be one that works with the existing rules and facts to prove or disprove the query\n"
        "6. Be careful with negation:\n"
        "- Sometimes the right missing fact helps prove the query\n"
        "- Sometimes it helps derive the opposite of the query, thereby disproving it\n"
        "## Output Format:\nYou MUST provide your answer in the following format:\n<think>\n"
        "[Explain your thought process: which rule(s) matter, which existing facts are relevant, and why the missing "
        "fact makes the query provable or disprovable]\n</think>\n<answer>\n"
        "[Output the single missing fact only, exactly as a natural-language sentence ending with a period]\n"
        "</answer>\n"
        "CRITICAL:\n- The answer section must contain ONLY one missing fact.\n"
        "- Do not include any extra commentary in the answer section.\n- Do not output more than one sentence.\n"
        "- Do not output a rule; output a fact about an entity in the context."),
    "crypto": (
        "You are an expert at inferring exact string transformation rules from examples and expressing them as "
        "correct Python functions.\n"
        "You will be given several training examples. Each example contains:\n"
        "- Input: a string\n"
        "- Output: the result of applying the same hidden transformation rule to the input\n"
        "Infer the transformation rule that is consistent with ALL training examples, then write a general Python "
        "implementation of that rule.\n"
        "Before answering, make sure the same rule explains all examples exactly and consistently at the character "
        "level.\n"
        "Think abductively: consider alternative hypotheses and choose the one that explains all examples exactly.\n"
        "Output format (MUST follow exactly):\n<think>\n"
        "[Explain your thought process: reason step by step about the possible rules, consider alternative "
        "hypotheses, and explain why the rule you chose best fits all examples.]\n</think>\n<answer>\n"
        "def transform(s):\n    ...\n</answer>\n"
        "Code requirements:\n"
        "- Define EXACTLY one function named transform.\n"
        "- The function takes one argument: s (a string).\n"
        "- It MUST return a string.\n"
        + _CODE_RULES
        + "- Preserve the behavior implied by the examples for all characters that appear.\n"
        + _STRICT_FORMAT),
    "list_functions": (
        "You are an expert at inferring simple list transformations from examples and expressing them as correct "
        "Python functions.\n"
        "You will be given several training examples. Each example contains:\n"
        "- Input: a list of integers\n"
        "- Output: the result of applying the same hidden transformation rule to the input\n"
        "Infer the transformation rule that is consistent with ALL training examples, then write a general Python "
        "implementation of that rule.\n"
        "Output format (MUST follow exactly):\n<think>\n"
        "[Explain your thought process: reason step by step about the possible rules, consider alternative "
        "hypotheses, and explain why your final rule best fits ALL training examples.]\n</think>\n<answer>\n"
        "def transform(lst):\n    ...\n</answer>\n"
        "Code requirements:\n"
        "- Define EXACTLY one function named transform.\n"
        "- The function takes one argument: lst (a list of integers).\n"
        "- It MUST return a list of integers. If the rule results in a single value, return it as a single-element "
        "list (e.g., [val]).\n"
        + _CODE_RULES
        + "- BE ROBUST: Handle edge cases like empty lists or lists with only 1 element.\n"
        + _STRICT_FORMAT),
}

USER = {
    "uniadilr": "Context:\n{context_str}\nHypothesis:\n{hypothesis}\nWhich sentence numbers provide the necessary "
                "evidence for the hypothesis?",
    "balanced_copa": "Premise: {premise}\nChoice 1: {choice1}\nChoice 2: {choice2}\nWhich choice is the most "
                     "plausible cause for the premise?",
    "causelogics": "Premises:\n{premises_text}\nRules:\n{rules_text}\nPhenomenon:\n{phenomenon}\nPossible Cause:\n"
                   "{possible_cause}\nIs the Possible Cause logically TRUE or FALSE?",
    "climate_fever": "Claim:\n{claim}\nEvidence:\n{evidence_text}\nDoes the provided evidence SUPPORT, REFUTE, "
                     "DISPUTED or provide NOT ENOUGH INFO for the claim?",
    "abductionrules": "Context:\n{context}\nQuery:\n{query}\nBased on the context and query above, identify the single "
                      "missing fact that, when added to the context, makes the query logically decidable.",
    "crypto": "Training examples:\n{train_prompt}\nInfer the underlying string transformation and provide the Python "
              "function implementation in the required format.",
    "list_functions": "Training examples:\n{train_prompt}\nInfer the underlying list transformation and provide the "
                      "Python function implementation in the required format.",
}


def _get(row: Mapping, key: str, source: str):
    if not isinstance(row, Mapping):
        raise ValueError(f"{source} row: expected an object with field {key!r} for its App. B prompt, got "
                         f"{type(row).__name__}")
    if key not in row:
        raise ValueError(f"{source} row: missing field {key!r} for its App. B prompt (has {sorted(row)})")
    return row[key]


def _lines(value) -> str:
    if isinstance(value, (list, tuple)):
        return "\n".join(str(v) for v in value)
    return str(value)


def _demonstrations(row: Mapping, source: str) -> str:
    train = _get(row, "train", source)
    pairs = train.get("normal") if isinstance(train, Mapping) else None
    if not pairs:
        raise ValueError(f"{source} row {row.get('id', row.get('index'))!r}: no train['normal'] demonstrations")
    show = (lambda v: v) if source == "crypto" else json.dumps
    for k, p in enumerate(pairs):
        if not (isinstance(p, Mapping) and "input" in p and "output" in p):
            raise ValueError(f"{source} row {row.get('id', row.get('index'))!r}: train['normal'][{k}] is {p!r:.60}, "
                             "expected an object with 'input' and 'output'")
    return "\n\n".join(f"Input: {show(p['input'])}\nOutput: {show(p['output'])}" for p in pairs)


def user_fields(source: str, row: Mapping) -> dict[str, str]:
    """The placeholder values of `USER[source]` for one raw row (see the module docstring)."""
    if source == "uniadilr":
        context = _get(row, "context", source)
        return {"context_str": "\n".join(f"{k}: {v}" for k, v in context.items()),
                "hypothesis": str(_get(row, "hypothesis", source))}
    if source == "balanced_copa":
        return {k: str(_get(row, k, source)) for k in ("premise", "choice1", "choice2")}
    if source == "causelogics":
        return {"premises_text": _lines(_get(row, "Premises", source)),
                "rules_text": _lines(_get(row, "Rules", source)),
                "phenomenon": str(_get(row, "Phenomenon", source)),
                "possible_cause": str(_get(row, "Possible Cause", source))}
    if source == "climate_fever":
        evidences = _get(row, "evidences", source)
        if not isinstance(evidences, list):
            raise ValueError(f"climate_fever row {row.get('claim_id')!r}: evidences is {type(evidences).__name__}, "
                             "expected a list")
        text = "\n".join(f"- {_get(e, 'evidence', source) if isinstance(e, Mapping) else e}" for e in evidences)
        return {"claim": str(_get(row, "claim", source)), "evidence_text": text}
    if source == "abductionrules":
        return {"context": str(_get(row, "context", source)),
                "query": str(_get(_get(row, "question", source), "text", source))}
    if source in ("crypto", "list_functions"):
        return {"train_prompt": _demonstrations(row, source)}
    raise ValueError(f"source {source!r}: expected one of {', '.join(SYSTEM)}")


def training_messages(source: str, row: Mapping) -> list[dict]:
    """[system, user] messages of the App. B.1 prompt of `source` for one raw row."""
    fields = user_fields(source, row)  # raises first for an unknown source
    return [{"role": "system", "content": SYSTEM[source]}, {"role": "user", "content": USER[source].format(**fields)}]
