#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, plan a 2BP schedule for LLaMA-7B on 4 H200s
# from the shipped profile measured on an H200 (profiles/h200-llama-7b.measured.json: pipeplan
# profile --backend cuda, 2026-11-26, its provenance inside), and show it. The analytic H100
# profile beside it (profiles/h100-sxm-llama-7b.analytic.json) plans the same way.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh --cli
set -x
./build/tools/pipeplan plan --profile profiles/h200-llama-7b.measured.json \
  --stages 4 --microbatches 8 --schedule 1f1b --backward 2bp -o plan.json
./build/tools/pipeplan show plan.json --trace plan.trace.json
