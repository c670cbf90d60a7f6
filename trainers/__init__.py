"""One readable trainer per algorithm (sft, dpo, grpo, dqn) and the state/optimizer code they share."""
