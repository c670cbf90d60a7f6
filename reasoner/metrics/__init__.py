"""Evaluation metrics: reliability over K samples, confidence intervals, Pareto fronts, SMT and training curves."""
