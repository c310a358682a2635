#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, plan a 2BP schedule for LLaMA-7B on 4 H100s
# from the shipped profile, and show it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh
set -x
./build/tools/pipeplan plan --profile profiles/h100-sxm-llama-7b.analytic.json \
  --stages 4 --microbatches 8 --schedule 1f1b --backward 2bp --memory 80GiB -o plan.json
./build/tools/pipeplan show plan.json --trace plan.trace.json
