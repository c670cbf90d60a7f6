"""`reasoner data build deeprd|proofwriter`: build the TFDS A* datasets and print split sizes and figures.

    reasoner data build deeprd|proofwriter ... [--cost max|sum]   (A* cost of the records' pushes/pops)
    reasoner data build deeprd [--data-dir DIR] [--seed 0] [--train 2000 --validation 200 --test 500]
                               [--lookahead 5 10] [--branches 4 8] [--jsonl OUT] [--source GENERATOR.json]
    reasoner data build proofwriter --manual-dir DIR [--source raw|logic-llm] [--world OWA] [--depth-dir depth-5]
                                    [--min-depth 3] [--file SPLIT=PATH ...]

A prepared dataset of the same name is reused ("reused": true in the JSON) when it was built from the same
manual dir or files, and refused (exit 2) when it was built from others. TFDS shows a progress bar per split. The
printed figures (JSON on stdout, last line) are the split sizes and the mean/median pushes and pops of host A* per
heuristic (paper Figs. 5-6), plus push histograms.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys

from reasoner.cli.arg_types import non_negative_int, positive_number


def register(subparsers) -> None:
    parser = subparsers.add_parser("data", help="build the A* datasets (TFDS, array_record)")
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION")
    sub.required = True
    build = sub.add_parser("build", help="build a dataset and print its figures")
    which = build.add_subparsers(dest="dataset", metavar="DATASET")
    which.required = True

    deeprd = which.add_parser("deeprd", help="generate DeepRD (defaults: 2000/200/500, L 5..10, B 4..8)")
    deeprd.add_argument("--data-dir", default=None, help="TFDS data dir (default: TFDS's)")
    deeprd.add_argument("--seed", type=int, default=0)
    deeprd.add_argument("--train", type=positive_number(int), default=2000)
    deeprd.add_argument("--validation", type=non_negative_int, default=200)
    deeprd.add_argument("--test", type=non_negative_int, default=500)
    deeprd.add_argument("--lookahead", type=int, nargs=2, default=(5, 10), metavar=("MIN", "MAX"))
    deeprd.add_argument("--branches", type=int, nargs=2, default=(4, 8), metavar=("MIN", "MAX"))
    deeprd.add_argument("--jsonl", default=None, help="also write every split as JSON lines to this path prefix")
    deeprd.add_argument("--source", default=None,
                        help="the DeepRD authors' graph_generator.py JSON (logic mode) instead of our generator; "
                             "all its records become the test split; the figures add mean pushes by lookahead")
    deeprd.set_defaults(func=_build_deeprd)
    _cost_flag(deeprd)

    pw = which.add_parser("proofwriter", help="ProofWriter from a manual dir (raw release or Logic-LLM JSON)")
    pw.add_argument("--data-dir", default=None, help="TFDS data dir (default: TFDS's)")
    pw.add_argument("--manual-dir", default=None, help="folder of the raw release or of Logic-LLM *.json files")
    pw.add_argument("--source", default="raw", choices=("raw", "logic-llm"))
    pw.add_argument("--world", default="OWA", choices=("OWA", "CWA"))
    pw.add_argument("--depth-dir", default="depth-5")
    pw.add_argument("--min-depth", type=int, default=3)
    pw.add_argument("--file", action="append", default=[], metavar="SPLIT=PATH",
                    help="explicit split file (repeatable); overrides discovery in --manual-dir")
    pw.set_defaults(func=_build_proofwriter)
    _cost_flag(pw)


def _cost_flag(parser) -> None:
    parser.add_argument("--cost", default="max", choices=("max", "sum"),
                        help="A* cost of the stored pushes/pops and figures: max (depth, Eq. 2) or sum (App. A.2)")


def _config_name(prefix: str, params: dict) -> str:
    digest = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    return f"{prefix}_{digest}"


def proofwriter_config_name(params: dict) -> str:
    """The paper's selection from the raw release (OWA, depth-5, shortest proof depth >= 3, files found in the
    manual dir) is the builder's registered config `owa_depth5`, the TFDS name configs/astar_paper.py reads
    (`proofwriter_astar/owa_depth5`); any other selection gets a name hashed from its parameters (pass it as
    `--config.data.tfds_name=proofwriter_astar/<name>`). Paths in `params` are absolute, so a dir's name does not
    depend on how it was typed. A build from another manual dir than the one a prepared dataset of the same name
    was built from is refused (`_source_clash`), since TFDS would reuse the old data."""
    if not params["files"] and params.get("cost", "max") == "max" and (params["source"], params["world"], params["depth_dir"], params["min_depth"]) == (
            "raw", "OWA", "depth-5", 3):
        return "owa_depth5"
    return _config_name("proofwriter", params)


def _report(builder, extra: dict) -> None:
    from reasoner.data.records import figures, format_figures
    from reasoner.data.tfds_builders import read_splits

    figs = figures(read_splits(builder))
    print(format_figures(figs), file=sys.stderr)
    print(json.dumps({"dataset": builder.name, "config": builder.builder_config.name, "data_dir": str(builder.data_dir),
                      **extra, "splits": figs}))


def _build_deeprd(args) -> int:
    from reasoner.data.deeprd import DeepRDSpec
    from reasoner.data.records import decode_record
    from reasoner.data.tfds_builders import Deeprd, DeeprdConfig, read_splits

    try:
        spec = DeepRDSpec(lookahead=tuple(args.lookahead), branches=tuple(args.branches))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    params = {"seed": args.seed, "train": args.train, "validation": args.validation, "test": args.test,
              "spec": [*spec.lookahead, *spec.branches, spec.extra_ratio, spec.max_degree]}
    extra: dict = {}
    if args.source:
        from reasoner.data.deeprd_generator import GeneratorFormatError, load_generator_file, push_table

        try:
            problems, skipped = load_generator_file(args.source)
            with open(args.source, "rb") as fh:
                digest = hashlib.sha1(fh.read()).hexdigest()[:16]
        except (GeneratorFormatError, OSError) as err:
            print(f"error: --source {args.source}: {err}", file=sys.stderr)
            return 2
        if skipped:
            for qid, reason in skipped:
                print(json.dumps({"id": qid, "skipped": reason}), file=sys.stderr)
            print(f"error: --source {args.source}: {len(skipped)} records not in the generator format", file=sys.stderr)
            return 2
        params = {"source": digest}
        extra["pushes_by_lookahead"] = push_table(problems, cost=args.cost)
    if args.cost != "max":
        params["cost"] = args.cost
    config = DeeprdConfig(name=_config_name("deeprd", params), seed=args.seed, train=args.train,
                          validation=args.validation, test=args.test, spec=spec, source=args.source or "",
                          cost=args.cost)
    builder = Deeprd(config=config, data_dir=args.data_dir, file_format="array_record")
    with contextlib.redirect_stdout(sys.stderr):  # TFDS chatter; stdout carries only the figures JSON
        builder.download_and_prepare()
    if args.jsonl:
        for split, records in read_splits(builder).items():
            with open(f"{args.jsonl}.{split}.jsonl", "w", encoding="utf-8") as fh:
                for rec in records:
                    fh.write(json.dumps(decode_record(rec)) + "\n")
    _report(builder, {"params": params, **extra})
    return 0


def _build_proofwriter(args) -> int:
    import tensorflow_datasets as tfds

    from reasoner.data.tfds_builders import EmptyDatasetError, ProofwriterAstar, ProofwriterConfig

    files: dict[str, list[str]] = {}
    for item in args.file:
        split, sep, path = item.partition("=")
        if not sep or not split or not path:
            print(f"error: --file {item!r}: expected SPLIT=PATH", file=sys.stderr)
            return 2
        files.setdefault(split, []).append(path)
    if not files and not args.manual_dir:
        print("error: give --manual-dir (raw release / Logic-LLM folder) or --file SPLIT=PATH", file=sys.stderr)
        return 2
    files = {split: [os.path.abspath(p) for p in paths] for split, paths in files.items()}
    manual_dir = os.path.abspath(args.manual_dir) if args.manual_dir else None
    params = {"source": args.source, "world": args.world, "depth_dir": args.depth_dir, "min_depth": args.min_depth,
              "files": files, "manual_dir": manual_dir}
    if args.cost != "max":
        params["cost"] = args.cost
    name = proofwriter_config_name(params)
    config = name if name == "owa_depth5" else ProofwriterConfig(  # TFDS takes a registered config by name only
        name=name, source=args.source, world=args.world, depth_dir=args.depth_dir, min_depth=args.min_depth,
        files=files, cost=args.cost)
    builder = ProofwriterAstar(config=config, data_dir=args.data_dir, file_format="array_record")
    source = {"manual_dir": None if files else manual_dir, "files": files}
    reused = builder.is_prepared()
    if reused and (clash := _source_clash(builder, source)):
        print(f"error: {clash}", file=sys.stderr)
        return 2
    dl_config = tfds.download.DownloadConfig(manual_dir=manual_dir) if manual_dir else None
    empty = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            builder.download_and_prepare(download_config=dl_config)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except EmptyDatasetError as err:
        empty = str(err)
    skipped = builder.load_report.skipped + builder.filter_report.skipped + builder.english_skipped
    for qid, reason in skipped:
        print(json.dumps({"id": qid, "skipped": reason}), file=sys.stderr)
    if not reused and empty is None:
        _record_source(builder, source)
    extra = {"params": params, "reused": reused, "load": builder.load_report.as_dict(),
             "filter": dict(builder.filter_report.counts), "skipped_items": len(skipped),
             "empty_splits": builder.empty_splits}
    if empty is not None:
        print(f"error: {empty}", file=sys.stderr)
        print(json.dumps({"dataset": builder.name, **extra, "splits": {}}))
        return 1
    _report(builder, extra)
    return 0


SOURCE_FILE = "build_source.json"  # beside TFDS's dataset_info.json: what the build read


def _record_source(builder, source: dict) -> None:
    with open(os.path.join(str(builder.data_dir), SOURCE_FILE), "w", encoding="utf-8") as fh:
        json.dump(source, fh, sort_keys=True)


def _source_clash(builder, source: dict) -> str | None:
    """Why the prepared dataset in `builder.data_dir` may not be reused for a build from `source`, or None.

    The paper's selection is always named `owa_depth5` (the name configs/astar_paper.py reads), whatever manual dir
    it comes from, and TFDS reuses a prepared dataset of that name without reading the files again: a build from
    another release (or a fixture) reported success and printed the figures of the first one. The manual dir (or
    the split files) of each build is recorded beside the data, and a build from another source stops here.
    """
    try:
        with open(os.path.join(str(builder.data_dir), SOURCE_FILE), encoding="utf-8") as fh:
            built = json.load(fh)
    except (OSError, ValueError):
        built = None
    if built == source:
        return None
    was = "a source it did not record" if built is None else (built["manual_dir"] or f"--file {built['files']}")
    now = source["manual_dir"] or f"--file {source['files']}"
    return (f"{builder.name}/{builder.builder_config.name} in {builder.data_dir} was built from {was}, not from "
            f"{now}; delete that folder to rebuild it from {now}, or pass another --data-dir")
