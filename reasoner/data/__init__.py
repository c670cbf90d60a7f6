"""Datasets: logic-program sources (ProofWriter raw and processed English, DeepRD) and their TFDS builders.

Light modules (parsers, generator) import only the standard library and `search.logic`; the TFDS builders
(`tfds_*.py`) import `tensorflow_datasets` and are loaded only where a dataset is built or read.
"""
