#!/usr/bin/env bash
# One host, all its accelerators, one process:
#   launch/single_host.sh configs/sft_astar.py:deeprd --workdir runs/sft [--config.x=y ...]
set -euo pipefail
cd "$(dirname "$0")/.."
config=$1; shift
exec .venv/bin/reasoner train --config "$config" "$@"
