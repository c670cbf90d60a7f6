#!/usr/bin/env bash
# One host, all its accelerators, one process, running any `reasoner` command:
#   launch/single_host.sh train --config configs/sft_astar.py:deeprd --workdir runs/sft [--config.x=y ...]
# (the arguments are the `reasoner` command line, so trainers and pipelines start the same way).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -eq 0 ]; then echo "usage: $0 COMMAND [ARGS...]   (a reasoner command line, e.g. train --config ...)" >&2; exit 2; fi
export REASONER_DISTRIBUTED=off  # one process: never wait for peers, whatever SLURM/TPU variables are set
exec .venv/bin/reasoner "$@"
