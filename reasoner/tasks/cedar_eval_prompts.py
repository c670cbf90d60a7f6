"""CEDAR-GRPO's evaluation prompts (App. B.2) for the held-out sets we load (`reasoner.data.cedar_heldout`).

Transcribed from the paper, whose HTML extraction runs the words together ("Youareanexpertin..."); the spaces and
line breaks are restored, the words are the paper's:
  B.2.2 Copa (effect)   COPA_EFFECT_SYSTEM / _USER: e-CARE questions that ask for an effect (see below);
  B.2.3 DefeasibleNLI   DEFEASIBLE_SYSTEM / _USER;
  B.2.6-B.2.8 MuSR      MUSR_SYSTEM[domain] / MUSR_USER, domains murder / object / team.
e-CARE is not in the paper's held-out suite (Table 6 cites it only as related work) and has no App. B prompt of its
own. Its records are COPA-shaped (premise, two hypotheses, ask-for cause | effect), so ours renders a cause question
with the training prompt B.1.2 (Balanced COPA, cause) and an effect question with B.2.2 (COPA, effect).
The MuSR `{problem}` is ours too (the paper prints only the placeholder): the question, then one "i - choice" line
per choice, indexed from 0 as its prompts say ("options indexed as 0, 1, 2, ...").
"""

from __future__ import annotations

from reasoner.tasks.cedar_prompts import _FORMAT

_INDEX_FORMAT = _FORMAT.format(slot="[Exactly one integer representing the index of the correct choice]")
_INDEX_ONLY = "CRITICAL: The answer section must contain ONLY the numeric index number of the correct choice. "

COPA_EFFECT_SYSTEM = (
    "You are an expert in logical reasoning and common-sense causal inference. Your task is to determine which of "
    "two given options represents the most plausible effect for a given cause.\n"
    "You will be provided with:\n"
    "1. A Cause describing a situation or event\n"
    "2. Two Options (Option 1 and Option 2)\n"
    "Your goal is to select the option that best describes the direct effect, logical consequence, or most likely "
    "resulting action of the given cause.\n"
    "## Instructions:\n"
    "1. Carefully read the provided cause\n"
    "2. Evaluate both Option 1 and Option 2 as potential effects or consequences\n"
    "3. Consider common sense, real-world knowledge, and typical cause-and-effect relationships\n"
    "4. Select the option that represents the most plausible direct effect\n"
    "5. Think step by step.\n"
    + _FORMAT.format(slot="[Either \"1\" or \"2\" - just the number, nothing else]")
    + "CRITICAL: The answer section must contain ONLY the number 1 or 2. Do not include any other text, "
    "explanation, or punctuation.")
COPA_EFFECT_USER = ("Cause: {premise}\nOption 1: {choice1}\nOption 2: {choice2}\nWhich of the following is the most "
                    "plausible EFFECT of this cause?")

DEFEASIBLE_SYSTEM = (
    "You are an expert in defeasible reasoning and logical analysis. Your task is to determine how new information "
    "affects the likelihood of a given hypothesis.\n"
    "You will be provided with:\n"
    "1. A Hypothesis (a tentative conclusion)\n"
    "2. An Update (new information)\n"
    "3. A Premise (optional contextual background)\n"
    "Your goal is to analyze the context and decide if the new Update makes the Hypothesis more likely or less "
    "likely to be true.\n"
    "## Instructions:\n"
    "1. Read the Hypothesis and the Premise (if provided) to understand the initial situation\n"
    "2. Carefully evaluate the new Update\n"
    "3. Determine if the Update provides evidence that supports the Hypothesis (strengthens it) or contradicts it "
    "(weakens it)\n"
    "4. Classify the effect as either STRENGTHENS or WEAKENS\n"
    "5. Think step by step.\n"
    + _FORMAT.format(slot="[STRENGTHENS or WEAKENS]")
    + "CRITICAL: The answer section must contain ONLY the exact word STRENGTHENS or WEAKENS. Do not include any "
    "other text, explanation, or punctuation.")
DEFEASIBLE_USER = ("Premise:\n{premise}\nHypothesis:\n{hypothesis}\nUpdate:\n{update}\nDoes this Update STRENGTHEN "
                   "or WEAKEN the Hypothesis?")

MUSR_SYSTEM = {
    "murder": (
        "You are a brilliant detective and an expert in deductive reasoning. Your task is to analyze clues to solve "
        "complex mysteries.\n"
        "You will be provided with:\n"
        "1. Context: A detailed detective story containing information about a crime, suspects, alibis, and clues\n"
        "2. Problem: A question about the mystery, followed by a list of numbered multiple-choice options\n"
        "Your goal is to logically deduce the truth from the context and identify the correct choice by its index "
        "number.\n"
        "## Instructions:\n"
        "1. Carefully read the Context to identify timelines, motives, means, and logical inconsistencies among the "
        "suspects’ statements\n"
        "2. Evaluate the Problem and all the provided choices\n"
        "3. Use deductive reasoning to eliminate impossible scenarios and identify the only logically sound answer\n"
        "4. Note the index number (e.g., 0, 1, 2, ...) of the correct choice\n"
        "5. Think step by step.\n"
        + _INDEX_FORMAT + _INDEX_ONLY
        + "Do not include the text of the choice, punctuation, or any other explanations inside the answer tags."),
    "team": (
        "You are an expert logical reasoner specializing in evaluating team skills and assigning people to tasks "
        "optimally. Your task is to analyze a story describing people, their abilities, and their teamwork dynamics "
        "in order to determine the best assignment of people to tasks.\n"
        "You will be provided with:\n"
        "1. Context: A story describing several people, their abilities at different tasks, and how well they work "
        "with others\n"
        "2. Problem: A question asking which assignment of people to tasks results in the most effective completion "
        "of the tasks, along with multiple-choice options indexed as 0, 1, 2, ...\n"
        "Your goal is to determine which assignment best utilizes each person’s skills while also considering "
        "teamwork effectiveness when two people must work together on a task.\n"
        "## Instructions:\n"
        "1. Carefully read the Context and identify each person’s skill level for the relevant tasks (e.g., great, "
        "acceptable, or bad)\n"
        "2. Determine how well different pairs of people work together when assigned to the same task\n"
        "3. Remember that one task will require two people working together\n"
        "4. Consider that if one person is bad at a task, the other person’s skill may not fully compensate unless "
        "they work well together\n"
        "5. Evaluate the overall effectiveness of each assignment option\n"
        "6. Select the option that results in the most effective overall completion of all tasks\n"
        "7. Think step by step.\n"
        + _INDEX_FORMAT + _INDEX_ONLY
        + "Do not include the text of the choice, punctuation, or any additional explanation."),
    "object": (
        "You are an expert logical reasoner specializing in tracking beliefs and object locations in narrative "
        "stories. Your task is to analyze a story and determine where a character believes an object is located.\n"
        "You will be provided with:\n"
        "1. Context: A story describing characters, their actions, and movements of objects\n"
        "2. Problem: A question about where a specific character believes an object is located, along with "
        "multiple-choice options indexed as 0, 1, 2, ...\n"
        "Your goal is to determine the correct answer by reasoning about what the character observed and therefore "
        "believes about the object’s location.\n"
        "## Instructions:\n"
        "1. Carefully read the Context and track the object’s location throughout the story\n"
        "2. Track what each character observes when the object is moved\n"
        "3. If a character observes the object moving, they update their belief about the object’s location\n"
        "4. If a character does NOT observe the object moving (e.g., they are absent or distracted), they will "
        "continue to believe the object remains in the last location where they saw it\n"
        "5. Analyze the Problem and evaluate all provided choices\n"
        "6. Determine which option correctly represents the character’s belief about the object’s location\n"
        "7. Think step by step.\n"
        + _INDEX_FORMAT + _INDEX_ONLY
        + "Do not include the text of the choice, punctuation, or any additional explanation."),
}
MUSR_USER = "Context:\n{context}\nProblem:\n{problem}\nWhat is the index number of the correct choice?"


def musr_problem(question: str, choices) -> str:
    """The MuSR `{problem}`: the question, then "i - choice" per choice, i from 0."""
    return question + "\n" + "\n".join(f"{i} - {c}" for i, c in enumerate(choices))
