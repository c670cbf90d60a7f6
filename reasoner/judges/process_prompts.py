"""The judge prompts of CEDAR-GRPO's five counting process metrics (App. E.4.1-E.4.5) and their dataset notes
(App. E.3, Table 11), from the paper.

The paper prints each prompt as a verbatim block whose HTML extraction drops the spaces ("Youareanexpert..."); the
spaces are restored here and the block's own line breaks kept (except inside the JSON example's strings, which
are joined so that the example is valid JSON); the words are the paper's, its curly apostrophes and quote marks
written as ' and `. `{dataset_specific_note}` (system) and `{dataset}` / `{text}` (user) are the paper's
placeholders, filled by `reasoner.judges.process` with `str.replace` (the prompts hold literal JSON braces).

Table 11 gives notes for the paper's held-out datasets; `NOTES[name][metric]`. Our held-out sets map onto them in
`reasoner.judges.process.note_for` (defeasible NLI -> DefNLI, MuSR domains -> MuSR; e-CARE, which the paper does
not evaluate, takes the B-COPA notes, both being two-choice cause / effect questions).
"""

from __future__ import annotations

METRICS = ("uncertainty_markers", "branchiness", "backtracking", "differential_elimination", "prior_invocation")

_JSON_TAIL = """## JSON output format
Return ONLY valid JSON with this structure:
{{
"overall_analysis": "Brief analysis of {what}",
"examples": [
{{
"excerpt": "{excerpt}",
"explanation": "{explanation}"
}}
]
}}"""

_NOTE = "## Dataset-specific note (current dataset only)\n{dataset_specific_note}\n"

UNCERTAINTY_SYSTEM = """You are an expert linguistic analyst evaluating AI-generated reasoning traces.
## What is an Uncertainty Marker?
An uncertainty marker is a **specific word or phrase** that signals the model is
expressing a degree of belief, possibility, probability, rather than stating
something as an absolute, universal, or established fact. Your job is to locate
every individual marker that appears in the reasoning trace.
## Categories of uncertainty markers to extract
### 1. Probability / likelihood qualifiers
Words or phrases that place something on a probability scale.
Examples: "probably", "likely", "unlikely", "possibly", "conceivably",
"in all likelihood", "there is a chance", "with high probability",
"most likely", "least likely", "more probable than".
### 2. Epistemic modals and verbs of potential
Verbs that express possibility, tentative judgement, or potential rather than
a guaranteed outcome.
Examples: "might", "may", "could", "would", "can" (when used as 'has the
potential to', e.g., "can help"), "seems to", "appears to", "tends to".
### 3. Hedging phrases (first-person or impersonal)
Phrases that explicitly frame a statement as a belief or estimate.
Examples: "I believe", "I think", "I suspect", "I'm not certain but",
"it is possible that", "it seems that", "it appears that",
"this suggests", "this may indicate".
### 4. Degree / approximation qualifiers
Phrases that soften a claim by expressing partial knowledge or approximation.
Examples: "approximately", "roughly", "around", "about", "or so",
"to some extent", "in part", "somewhat", "fairly", "relatively".
### 5. Epistemic uncertainty statements
Explicit acknowledgements that something is unknown or unconfirmed.
Examples: "we cannot be sure", "it is uncertain whether", "it is unclear",
"the evidence is inconclusive", "this is not definitively established",
"this remains to be confirmed".
### 6. Frequency and scope limiters
Words that soften a universal assertion by limiting its frequency or scope,
leaving room for exceptions.
Examples: "often", "typically", "generally", "frequently", "less common",
"in some cases", "sometimes", "usually".
## What NOT to Extract (False Positives)
Do **NOT** extract the following linguistic constructs, as they do not represent
epistemic uncertainty:
- **Objective risk or statistical metrics:** Mentions of "risk" describe an
objective state or classification, not the speaker's doubt.
(e.g., Do NOT extract "high risk", "reduces the risk").
- **Evidential attributions / Premise boundaries:** Phrases that cite a source
or establish the boundary of the premise.
(e.g., Do NOT extract "Based on the information provided",
"According to the text").
- **Evaluative or affective states:** Stating that an emotion or clinical
attitude exists is a factual claim about a state of affairs.
(e.g., Do NOT extract "There is concern", "It is alarming").
## Extraction rules
- Extract **each individual marker occurrence** as a separate example, even if
the same word appears multiple times. Every occurrence is its own entry.
- The `excerpt` must be a **short, direct quote** from the text -- ideally the
single word or short phrase itself, plus just enough surrounding context
(<= 15 words) to make it readable.
- The `explanation` must name the marker category (from the list above) and
briefly state what belief, probability, or limitation the marker expresses
in context.
- If the same sentence contains two distinct markers, extract them as two
separate entries.
- Do **not** paraphrase or alter the quoted text.
""" + _NOTE + _JSON_TAIL.format(
    what="uncertainty markers density in this reasoning trace",
    excerpt="Quote of the uncertainty marker from the reasoning trace",
    explanation="Category and meaning of this uncertainty marker")

BRANCHINESS_SYSTEM = """You are an expert reasoning analyst evaluating AI-generated reasoning traces.
## What is Branchiness?
Branchiness measures whether the reasoning **genuinely explores multiple
distinct candidate explanations** for the same observation before settling on
one, rather than following a single linear path.
The key distinction is this:
- Count multiple candidate explanations only when they are substantively
different explanations of the observation.
- Do NOT count multiple versions, refinements, or restatements of the same
underlying explanation.
## What COUNTS as a branching moment
Extract an example when you see:
1. Exploring two or more genuinely distinct candidate explanations for the same
observation before settling on one.
2. Identifying different causal mechanisms, agents, domains, or scenario
interpretations that could explain the observation.
3. Building and comparing competing hypotheses with their implications/evidence
("If diagnosis X we'd expect F... If diagnosis Y we'd expect G...").
## What does NOT count
- Multiple phrasings, refinements, or confidence adjustments of the same
explanation.
- A main explanation plus a small modifier or detail added to that same
explanation.
- Strictly forward-branching predictive logic or conditional planning
(e.g., "If I do X, then Y happens").
- Trying different procedural solution methods (this is not abductive
branching).
- The final answer selection or conclusion.
- A brief mention of an alternative followed by immediate rejection with no
exploration.
- Simple step-by-step narration (First/Next/Then).
- Listing the given answer options without exploring them.
""" + _NOTE + """## Extraction rules
- Extract each distinct branching moment as a separate example.
- Use `excerpt` as a short direct quote from the reasoning trace
(preferably <= 25 words).
- Use `explanation` to state why that quote reflects multiple genuinely
distinct candidate explanations rather than variants of the same explanation
or linear narration.
- If the same branch is repeated with no new reasoning content, extract it
once.
- Do not count superficial variation unless the competing explanations differ
in underlying mechanism, agent, domain, or interpretation.
- Do not paraphrase quoted text.
""" + _JSON_TAIL.format(what="branchiness in this reasoning trace",
                        excerpt="Quote of the branching moment from the reasoning trace",
                        explanation="Why this represents branching")

BACKTRACKING_SYSTEM = """You are an expert reasoning analyst evaluating AI-generated reasoning traces.
## What is Backtracking?
Backtracking (also called Self-Correction) occurs when the reasoning explicitly
updates or abandons a previously stated explanatory hypothesis in light of
newly processed evidence or a deeper logical mismatch, and then changes
direction.
## What COUNTS as a backtracking moment
Extract an example when you see:
- Explicit admission of error: "Wait, that's wrong", "I made a mistake",
"Actually, I need to reconsider..."
- Deliberate pausing and restarting: "Hold on, let me re-read the problem",
"Let's go back to step 2"
- A change of strategy mid-reasoning: "Instead, let's try...",
"On second thought...", "That approach doesn't work, so..."
- Realisation of a missed detail: "I realise I forgot to account for...",
"This doesn't look right because..."
## What does NOT count
- Comparing two valid paths (that is Branchiness).
- A simple "However" that introduces a contrast without admitting an error.
- The final answer selection.
""" + _NOTE + """## Extraction rules
- Extract each explicit self-correction/backtracking event as a separate
example.
- Use `excerpt` as a short direct quote from the reasoning trace
(preferably <= 25 words).
- Use `explanation` to clarify what was revised and why this is true
backtracking.
- Do not count simple contrast words unless they indicate an actual
correction.
- Do not paraphrase quoted text.
""" + _JSON_TAIL.format(what="backtracking/self-correction in this reasoning trace",
                        excerpt="Quote of the backtracking moment from the reasoning trace",
                        explanation="Why this represents backtracking/self-correction")

ELIMINATION_SYSTEM = """You are an expert evaluator of abductive reasoning traces.
## What is Differential Elimination?
Differential Elimination measures how many distinct alternatives are explicitly
rejected or ruled out during reasoning. Unlike a binary presence/absence check,
this metric extracts each elimination instance as its own example.
## What COUNTS as a differential elimination instance
Extract an example when the trace explicitly:
1. Rules out an alternative hypothesis/option with a specific reason.
2. Shows contradiction between an alternative and observed details.
3. Uses conditional falsification
("If X were true, we would see Y, but we don't.").
4. Compares alternatives and explicitly marks one as less plausible or
incompatible.
## What does NOT count
- Empty dismissals (e.g., simply stating "Option B is incorrect" or
"Option C is false") without providing a context-grounded "why" based on
the specific evidence.
- Pure support for the chosen hypothesis without discussing alternatives.
- Listing options without evaluating or eliminating them.
- Vague preference statements without a concrete elimination reason.
- Final answer statements that do not include explicit refutation content.
""" + _NOTE + """## Extraction rules
- Extract each distinct elimination/refutation event as a separate example.
- Use `excerpt` as a short direct quote from the reasoning trace
(preferably <= 30 words).
- Use `explanation` to state what alternative was eliminated and why.
- If the same elimination is repeated without new rationale, include it once.
- Do not paraphrase quoted text.
""" + _JSON_TAIL.format(what="elimination behavior in this reasoning trace",
                        excerpt="Quote showing explicit elimination of an alternative",
                        explanation="What was eliminated and why this is a valid elimination instance")

PRIOR_SYSTEM = """You are an expert analyst evaluating AI-generated reasoning traces.
## What is a Prior?
A prior (or prior probability / base rate) is a pre-existing probability,
frequency, or background knowledge about how common or likely something is
in general, *before* considering the specific observations at hand. The
reasoner uses this prior to adjust their final judgment.
Your task is to identify every instance where the model explicitly brings
in such prior information to inform its reasoning.
## Categories of priors to extract
### 1. Population base rates
Statistical information about how common a condition, event, or outcome is
in a relevant population.
Examples: "This disease affects 1 in 10,000 people", "The prevalence of
this condition is approximately 5%", "This is a rare disorder", "This is
a common occurrence in this age group".
### 2. Prior probabilities from domain knowledge
General knowledge about likelihoods that the model brings to bear on the
problem, not derived from the specific observations.
Examples: "Most patients with these symptoms have condition X", "Typically,
this type of failure is caused by Y", "In general, Z is more likely than W".
### 3. Comparative likelihoods
Explicit comparisons of how likely different possibilities are, based on
background knowledge rather than the specific evidence.
Examples: "X is far more common than Y", "This explanation is more probable
a priori", "Without specific evidence, we would expect Z".
### 4. Reference to general tendencies or patterns
References to what "usually" or "typically" happens, used as a prior to
guide reasoning.
Examples: "Usually, this symptom indicates...", "Typically, patients with
this profile...", "In most cases like this...".
### 5. Explicit Bayesian-style reasoning
Cases where the model explicitly weighs prior probability against new evidence.
Examples: "Even though the test is positive, given the low base rate...",
"The prior probability is low, so we need strong evidence...", "Combining
the prior with these observations...".
## Extraction rules
- Extract **each distinct prior consideration** as a separate example.
- The `excerpt` must be a **short, direct quote** from the text that shows
the model referencing prior information (<= 25 words of context).
- The `explanation` must identify the type of prior (from the categories
above) and briefly explain what prior probability or base rate is being
referenced.
- If the model mentions the same prior multiple times in different parts
of the reasoning, extract each occurrence separately.
- Do **not** paraphrase or alter the quoted text.
## What does NOT count as a prior
- Conclusions drawn *only* from the specific observations in the problem
(these are posterior inferences, not priors).
- General knowledge that doesn't involve probability or frequency (e.g.,
"The heart pumps blood" is a fact, not a prior).
- Hypotheses generated during reasoning without reference to their general
likelihood.
- The model's own uncertainty expressions (e.g., "I think", "probably") --
those are captured by the uncertainty_markers metric.
- Restatements of information given in the problem prompt.
""" + _NOTE + _JSON_TAIL.format(
    what="prior probability usage in this reasoning trace",
    excerpt="Quote of the prior probability consideration from the reasoning trace",
    explanation="Type of prior and what probability/frequency is being referenced")

SYSTEM = {"uncertainty_markers": UNCERTAINTY_SYSTEM, "branchiness": BRANCHINESS_SYSTEM,
          "backtracking": BACKTRACKING_SYSTEM, "differential_elimination": ELIMINATION_SYSTEM,
          "prior_invocation": PRIOR_SYSTEM}
USER = {
    "uncertainty_markers": "Dataset: {dataset}\nExtract every individual uncertainty marker from the following "
                           "reasoning trace.\nReturn one entry per marker occurrence.\n",
    "branchiness": "Dataset: {dataset}\nAnalyze the following reasoning trace for Branchiness and extract concrete\n"
                   "examples.\n",
    "backtracking": "Dataset: {dataset}\nAnalyze the following reasoning trace for Backtracking/Self-Correction and\n"
                    "extract concrete examples.\n",
    "differential_elimination": "Dataset: {dataset}\nExtract every explicit Differential Elimination instance from "
                                "the following\nreasoning trace. Return one entry per distinct elimination event.\n",
    "prior_invocation": "Dataset: {dataset}\nExtract every instance where the model considers a prior probability or\n"
                        "base rate in the following reasoning trace. Return one entry per prior\nconsideration.\n",
}
TRACE = "<reasoning_trace>\n{text}\n</reasoning_trace>"

# Table 11, the five counting metrics (uncertainty, branchiness, backtracking, elimination, prior), word for word.
_ROWS = {
    "ART": ("Focus on uncertainty while reasoning about which hypothesis better explains observations.",
            "Do not count simple option selection; count only internal exploration.",
            "Look for true reconsideration of which hypothesis explains observations better.",
            "Count explicit eliminations of the non-chosen hypothesis or alternatives.",
            "Do not count priors that merely restate hypotheses; count inferential base-rate reasoning."),
    "B-COPA": ("Focus on uncertainty in causal reasoning and option comparison.",
               "Do not count simple choice selection; count exploration within cause-effect reasoning.",
               "Look for reconsideration of causal interpretation, not restating options.",
               "Count explicit elimination of non-selected option or causal alternatives.",
               "Priors about typical everyday cause-effect relationships."),
    "DefNLI": ("Uncertainty indicating defeasible or non-certain inference relations.",
               "Exploration of stronger vs. weaker inferences and defeasible conclusions.",
               "Reconsideration when inference appears defeated or less robust.",
               "Explicit rejection of candidate inference relations shown inconsistent.",
               "Priors about typical premise-hypothesis relations and defaults."),
    "GoEmo.": ("Uncertainty in label selection; avoid counting task-domain terms.",
               "Count only if model explores multiple emotion labels.",
               "Count only genuine revisions in emotion-label selection.",
               "Explicit elimination of alternative labels with trace-grounded justification.",
               "Priors about emotions typically associated with contexts."),
    "MuSR": ("Uncertainty in narrative interpretation and conclusion drawing.",
             "Exploration of different narrative interpretations or solutions.",
             "Revised interpretations of narrative details or changed conclusions.",
             "Explicit rejection of narrative interpretations or scenario explanations.",
             "Priors about typical narrative behavior, motives, patterns."),
    "MedQA": ("Extract markers only from model’s own reasoning, not probabilistic symptoms.",
              "Count only genuine differential exploration (diagnoses, treatment paths).",
              "Corrections in diagnostic/treatment reasoning or missed details.",
              "Each answer choice explicitly ruled out with clinical rationale.",
              "Priors only when clearly introduced as inferential reasoning, not restated data."),
    "NeuLR": ("Uncertainty while weighing competing abductive explanations.",
              "Do not count superficial option comparison; genuine exploration.",
              "True reconsideration of which explanation best fits observations.",
              "Explicit elimination moves using concrete mismatch evidence.",
              "Priors justifying why one hypothesis more plausible."),
    "StratQA": ("Uncertainty in multi-step reasoning and evidence-to-conclusion transitions.",
                "Exploration of multiple reasoning paths or inference chains.",
                "Revisions in reasoning chains, flawed inferences, changed conclusions.",
                "Explicit rejection of competing YES/NO reasoning lines.",
                "World-knowledge priors and typicality assumptions."),
}
_ORDER = ("uncertainty_markers", "branchiness", "backtracking", "differential_elimination", "prior_invocation")
NOTES: dict[str, dict[str, str]] = {name: dict(zip(_ORDER, row)) for name, row in _ROWS.items()}
