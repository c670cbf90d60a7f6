#!/usr/bin/env bash
# A TPU pod slice: the same command on every worker, one process each; jax.distributed.initialize()
# inside `reasoner` finds the coordinator from the TPU metadata (reasoner/distributed.py).
#   TPU=my-v5p-64 ZONE=us-east5-a launch/tpu_pod.sh configs/grpo_astar.py:llama1b --workdir gs://bucket/run1
# The checkout and .venv must exist at the same path on every worker (e.g. `--worker=all --command "git clone ... && make setup"`).
set -euo pipefail
: "${TPU:?set TPU to the TPU VM name}" "${ZONE:?set ZONE to its zone}"
config=$1; shift
repo=${REPO_DIR:-\$HOME/reasoner}
gcloud compute tpus tpu-vm ssh "$TPU" --zone "$ZONE" --worker=all \
  --command "cd $repo && .venv/bin/reasoner train --config $config $*"
