"""RL-of-Thoughts: the navigator, its batched environment over logic blocks, self-evaluation states and PRMs.

Modules: `navigator` (Dueling MLP), `state` (self-evaluation prompt and score parsing), `blocks` (the five
logic blocks' prompts and parsers), `env` (the batched MDP, protocol `reset(rng, n)` / `step(actions)`),
`prm` (process reward models: Math-Shepherd over a causal LM, verifier PRMs, outcome only), `llm`
(batched text generation over our sampler or an OpenAI-compatible endpoint).
"""
