"""Reward functions for GRPO: a registry of named, weighted functions and the verifiers behind them."""

from reasoner.rewards.registry import (  # noqa: F401
    CompositeReward,
    RewardBatch,
    RewardFailure,
    WeightedReward,
    build_reward,
    completion_text,
    register_reward,
    registered_rewards,
)
