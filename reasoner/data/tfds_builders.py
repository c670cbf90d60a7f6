"""TFDS `GeneratorBasedBuilder`s for the A* datasets: `deeprd` (generated) and `proofwriter_astar` (manual dir).

They run without TensorFlow: build with `file_format="array_record"` and read back with `builder.as_data_source()`
or `tfds.data_source(name, data_dir=...)` (random access, what grain consumes). Records are described in `records`.

    builder = Deeprd(config=DeeprdConfig(name="small", train=20, validation=5, test=5), data_dir=d,
                     file_format="array_record")
    builder.download_and_prepare()
    builder.as_data_source()["train"][0]["depth"]
"""

from __future__ import annotations

import dataclasses
import pathlib

import tensorflow_datasets as tfds

from reasoner.data.deeprd import DEFAULT_SPLIT_SIZES, DeepRDSpec, generate_problem, problem_record
from reasoner.data.proofwriter_english import load_logic_llm
from reasoner.data.proofwriter_examples import FilterReport, logic_llm_records, raw_records
from reasoner.data.proofwriter_raw import SPLIT_FILE_STEMS, LoadReport, find_split_files, load_raw
from reasoner.data.records import record_features

__all__ = ["Deeprd", "DeeprdConfig", "ProofwriterAstar", "ProofwriterConfig", "EmptyDatasetError", "read_splits"]


class EmptyDatasetError(ValueError):
    """Every split came out empty (TFDS cannot write empty splits)."""


@dataclasses.dataclass(eq=False)
class DeeprdConfig(tfds.core.BuilderConfig):
    """Split sizes, seed and the generator spec (defaults: the paper's 2000/200/500, L 5..10, B 4..8). `source`: a
    DeepRD authors' generator JSON file (`deeprd_generator`) instead of our generator; all its records form the
    `source_split` split (default "test": the authors' problems are an evaluation set) and the sizes are ignored."""

    source: str = ""
    source_split: str = "test"
    cost: str = "max"  # A* cost of the records' pushes/pops ("max" | "sum"); depth is always the max-cost depth
    seed: int = 0
    train: int = DEFAULT_SPLIT_SIZES["train"]
    validation: int = DEFAULT_SPLIT_SIZES["validation"]
    test: int = DEFAULT_SPLIT_SIZES["test"]
    spec: DeepRDSpec = dataclasses.field(default_factory=DeepRDSpec)


class Deeprd(tfds.core.GeneratorBasedBuilder):
    """DeepRD logic-mode problems, each checked by host A* (depth == L, start out-degree == B)."""

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [DeeprdConfig(name="default", description="paper sizes: 2000/200/500, L 5..10, B 4..8")]

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(builder=self, description=__doc__, features=record_features(),
                                     supervised_keys=None)

    def _split_generators(self, dl_manager):
        cfg = self.builder_config
        if cfg.source:
            return {cfg.source_split: self._generator_examples(cfg.source)}
        sizes = {"train": cfg.train, "validation": cfg.validation, "test": cfg.test}
        return {name: self._generate_examples(split=name, size=size) for name, size in sizes.items() if size > 0}

    def _generate_examples(self, *, split: str, size: int):
        cfg = self.builder_config
        for index in range(size):
            problem = generate_problem(seed=cfg.seed, split=split, index=index, spec=cfg.spec)
            yield problem.id, problem_record(problem, cost=cfg.cost)

    def _generator_examples(self, path: str):
        from reasoner.data import deeprd_generator

        problems, skipped = deeprd_generator.load_generator_file(path)
        if skipped:
            raise deeprd_generator.GeneratorFormatError(f"{path}: {len(skipped)} bad records, first: {skipped[0][1]}")
        for problem in problems:
            yield problem.id, deeprd_generator.problem_record(problem, cost=self.builder_config.cost)


@dataclasses.dataclass(eq=False)
class ProofwriterConfig(tfds.core.BuilderConfig):
    """source: "raw" (meta-*.jsonl of the release) or "logic-llm" (processed JSON). `files` maps split -> paths and
    overrides discovery in the manual dir. min_depth: the paper's filter (shortest proof depth >= 3)."""

    source: str = "raw"
    world: str = "OWA"
    depth_dir: str = "depth-5"
    min_depth: int = 3
    files: dict = dataclasses.field(default_factory=dict)
    cost: str = "max"  # A* cost of the records' pushes/pops ("max" | "sum"); depth is always the max-cost depth


class ProofwriterAstar(tfds.core.GeneratorBasedBuilder):
    """ProofWriter (program, provable goal) pairs with shortest depth >= min_depth, from a manual directory."""

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [ProofwriterConfig(name="owa_depth5", description="raw release, OWA depth-5, depth >= 3")]
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Download proofwriter-dataset-V2020.12.3 (https://allenai.org/data/proofwriter), unzip it and pass its "
        "folder as manual_dir (meta-train/dev/test.jsonl are read from <world>/<depth>/). For the processed "
        "Logic-LLM form, use config source='logic-llm' and a folder holding *train*.json / *dev*.json / *test*.json.")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.load_report = LoadReport()
        self.filter_report = FilterReport()
        self.english_skipped: list[tuple[str, str]] = []
        self.empty_splits: list[str] = []

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(builder=self, description=__doc__, features=record_features(),
                                     supervised_keys=None)

    def _split_files(self, manual_dir) -> dict[str, list[pathlib.Path]]:
        cfg = self.builder_config
        if cfg.files:
            return {split: [pathlib.Path(p) for p in (paths if isinstance(paths, (list, tuple)) else [paths])]
                    for split, paths in cfg.files.items()}
        if manual_dir is None:
            raise FileNotFoundError("no manual_dir given. " + self.MANUAL_DOWNLOAD_INSTRUCTIONS)
        if cfg.source == "raw":
            return {split: [path] for split, path in find_split_files(manual_dir, world=cfg.world,
                                                                       depth=cfg.depth_dir).items()}
        root = pathlib.Path(manual_dir)
        found = {split: sorted(root.glob(f"*{stem}*.json")) for split, stem in SPLIT_FILE_STEMS.items()}
        found = {split: paths for split, paths in found.items() if paths}
        if not found:
            raise FileNotFoundError(f"no Logic-LLM ProofWriter files (*train*/*dev*/*test*.json) under {root}. "
                                    + self.MANUAL_DOWNLOAD_INSTRUCTIONS)
        return found

    def _split_generators(self, dl_manager):
        manual = None
        if not self.builder_config.files:
            try:
                manual = dl_manager.manual_dir
            except AssertionError as err:  # TFDS's way of saying the manual dir is missing or empty
                raise FileNotFoundError(str(err)) from None
        files = self._split_files(manual)
        # Records are computed up front because TFDS cannot write an empty split: splits the filter empties are
        # left out and listed in `empty_splits`.
        records = {split: list(self._records(paths, split=split)) for split, paths in files.items()}
        self.empty_splits = sorted(split for split, recs in records.items() if not recs)
        kept = {split: recs for split, recs in records.items() if recs}
        if not kept:
            raise EmptyDatasetError(
                f"no ProofWriter question survives the filter (provable goal, depth >= {self.builder_config.min_depth})"
                f" in {sorted(files)}: {dict(self.filter_report.counts)}")
        return {split: self._generate_examples(records=recs) for split, recs in kept.items()}

    def _records(self, paths, *, split: str):
        from tqdm.auto import tqdm

        cfg = self.builder_config
        if cfg.source == "raw":
            theories = load_raw(paths, report=self.load_report, default_world=cfg.world)
            theories = tqdm(theories, desc=f"{split}: A* filter", unit=" theories")
            return raw_records(theories, min_depth=cfg.min_depth, report=self.filter_report, cost=cfg.cost)
        if cfg.source == "logic-llm":
            questions = []
            for path in paths:
                qs, skipped = load_logic_llm(path)
                questions.extend(qs)
                self.english_skipped.extend(skipped)
            questions = tqdm(questions, desc=f"{split}: A* filter", unit=" questions")
            return logic_llm_records(questions, min_depth=cfg.min_depth, report=self.filter_report, cost=cfg.cost)
        raise ValueError(f"source {cfg.source!r}: expected 'raw' or 'logic-llm'")

    def _generate_examples(self, *, records):
        for rec in records:
            yield rec["id"], rec


def read_splits(builder: tfds.core.DatasetBuilder) -> dict[str, list[dict]]:
    """Every split of a prepared builder, read through `as_data_source` (array_record, no TensorFlow)."""
    sources = builder.as_data_source()
    return {name: [src[i] for i in range(len(src))] for name, src in sources.items()}
