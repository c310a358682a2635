#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, plan a 2BP schedule for LLaMA-7B on 4 H200s
# from the shipped profile measured on an H200 (profiles/h200-llama-7b.measured.json: pipeplan
# profile --backend cuda, 2026-11-26, its provenance inside), and show it. The analytic H100
# profile beside it (profiles/h100-sxm-llama-7b.analytic.json) plans the same way.
# Usage: bash tools/quickstart.sh   (-h or --help: what it does)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -gt 0 ]; then
  case "$1" in
    -h | --help)
      cat <<'USAGE'
Usage: bash tools/quickstart.sh
Installs the missing Debian packages and builds the pipeplan CLI (tools/setup.sh --cli), then
plans a 1F1B schedule with 2BP for LLaMA-7B on 4 H200s from profiles/h200-llama-7b.measured.json
into plan.json and shows it, writing the Perfetto trace plan.trace.json. Takes no arguments.
USAGE
      exit 0
      ;;
  esac
  echo "quickstart: unknown argument '$1' (it takes none; -h or --help says what it does)" >&2
  exit 2
fi
bash tools/setup.sh --cli
set -x
./build/tools/pipeplan plan --profile profiles/h200-llama-7b.measured.json \
  --stages 4 --microbatches 8 --schedule 1f1b --backward 2bp -o plan.json
./build/tools/pipeplan show plan.json --trace plan.trace.json
