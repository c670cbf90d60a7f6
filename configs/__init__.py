"""Experiment configs (`get_config(variant)`), model presets and the sharding rules table."""
