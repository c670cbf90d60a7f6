#!/usr/bin/env bash
# A TPU pod slice: ONE job whose processes are the slice's workers. The same `reasoner` command starts once on
# every worker (`--worker=all`); jax.distributed.initialize() inside it (reasoner/distributed.py,
# REASONER_DISTRIBUTED=auto) finds the coordinator from the TPU metadata, so the workers form one JAX job.
#   TPU=my-v5p-64 ZONE=us-east5-a launch/tpu_pod.sh train --config configs/grpo_astar.py:llama1b --workdir /mnt/runs/run1
# The arguments are the `reasoner` command line. The checkout and .venv must exist at the same path on every
# worker (e.g. `--worker=all --command "git clone ... && make setup"`), and the workdir must be shared: a bucket
# mounted at the same path on every worker (gcsfuse; `reasoner` refuses a gs:// URL as --workdir).
set -euo pipefail
: "${TPU:?set TPU to the TPU VM name}" "${ZONE:?set ZONE to its zone}"
if [ "$#" -eq 0 ]; then echo "usage: TPU=... ZONE=... $0 COMMAND [ARGS...]" >&2; exit 2; fi
repo=${REPO_DIR:-'$HOME/reasoner'}  # expanded on the worker
printf -v args ' %q' "$@"              # quoted once for the remote shell
gcloud compute tpus tpu-vm ssh "$TPU" --zone "$ZONE" --worker=all \
  --command "cd $repo && REASONER_DISTRIBUTED=auto .venv/bin/reasoner$args"
