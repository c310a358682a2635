#!/usr/bin/env bash
# The seed corpus of every fuzz target, from the shipped files: the shipped profile, the PyTorch
# CSV fixtures, the Hugging Face configs in tests/fuzz/seeds, and plans, profiles, CSVs and a
# trace that `pipeplan` makes from the shipped model presets, and the shipped gpus.json. Written to OUT/<target>/.
# Usage: bash tests/fuzz/seed_corpus.sh OUT PIPEPLAN
set -euo pipefail
out=${1:?usage: seed_corpus.sh OUT PIPEPLAN}
pipeplan=$(realpath "${2:?usage: seed_corpus.sh OUT PIPEPLAN}")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$out"/{plan,profile,hf_config,torch_csv,trace,gpus}
out=$(realpath "$out")
cd "$out"

# Plans: the shapes that exercise the most code (2BP, interleaved chunks, BPipe transfers, a
# version 2 and a version 1 file), kept small: libFuzzer mutates small inputs faster.
"$pipeplan" plan --model tiny --stages 2 -m 2 --backward 2bp -o plan/tiny-1f1b-2bp.json >/dev/null
"$pipeplan" plan --uniform 1:1:1:0.1 --stages 2 -m 2 -o plan/uniform-1f1b.json >/dev/null
"$pipeplan" plan --uniform 1:1:1:0 --uniform-mem 1:-0.5:-0.5 --stages 2 -m 4 --chunks 2 \
  --schedule interleaved --backward 2bp-fill -o plan/uniform-interleaved.json >/dev/null
"$pipeplan" plan --model tiny --stages 4 -m 8 --bpipe on --memory 0 -o plan/tiny-bpipe.json >/dev/null
python3 "$root/tools/calibrate/plan_json.py" plan/uniform-1f1b.json plan/uniform-1f1b-v2.json
perl -0pe 's/"version": 2/"version": 1/; s/,\n\s*"transfer": "[a-z]+"//g' plan/uniform-1f1b-v2.json \
  >plan/uniform-1f1b-v1.json

# Profiles: the shipped one and two small analytic ones.
cp "$root/profiles/h100-sxm-llama-7b.analytic.json" profile/
"$pipeplan" profile --analytic --model tiny --mbs 1,2 --max-concat 2 -o profile/tiny.json >/dev/null
"$pipeplan" profile --analytic --model gpt-1.5b --gpu a100 --attention materialized \
  --max-concat 1 -o profile/gpt.json >/dev/null

# Model files.
cp "$root"/tests/fuzz/seeds/hf_config/*.json hf_config/

# PyTorch CSVs: the fixtures (torch's exact form) and pipeplan's own export.
cp "$root"/tests/schedules/fixtures/torch/*.csv torch_csv/
"$pipeplan" plan --uniform 1:1:1:0 --stages 2 -m 3 --schedule zb-h1 --backward 2bp \
  -o zb.json >/dev/null
"$pipeplan" export zb.json -o torch_csv/zb-h1.csv >/dev/null
rm -f zb.json torch_csv/*.layers.json

# A trace of the plan fuzz_trace holds (uniform 1:1:1:0.1, 2 stages, 2 micro-batches).
"$pipeplan" show plan/uniform-1f1b.json --trace trace/uniform-1f1b.json >/dev/null

# The shipped GPU table.
cp "$root/profiles/gpus.json" gpus/
for target in plan profile hf_config torch_csv trace gpus; do
  echo "seed_corpus: $target: $(ls "$target" | wc -l) files, $(du -sk "$target" | cut -f1) KiB"
done
