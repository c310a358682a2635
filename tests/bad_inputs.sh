#!/usr/bin/env bash
# Replays known bad inputs against a pipeplan binary and checks
# each one ends cleanly: exactly one line of output (stdout and stderr together), a non-zero
# exit, no file written, created or replaced (every file's type, link and checksum compared),
# within the time limit, never "internal error", and, where the case gives one, the message it
# expects.
# Usage: bash tests/bad_inputs.sh PIPEPLAN [SECONDS]   (ctest runs it as BadInputs.Replay)
set -uo pipefail

pipeplan=$(realpath "${1:?usage: bad_inputs.sh PIPEPLAN [SECONDS]}")
limit=${2:-5}
fixtures=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/schedules/fixtures/torch
plan_json=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tools/calibrate/plan_json.py
work=$(mktemp -d "${TMPDIR:-/tmp}/pipeplan_bad_inputs.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Inputs, made by this pipeplan and then broken.
inputs=$work/inputs
mkdir -p "$inputs/cfg" "$inputs/gpus" "$inputs/gpus_tiny_hbm" "$inputs/gpus_absurd_peak" \
  "$inputs/gpus_20k" "$inputs/gpus_no_cpu"
cp "$(dirname "${BASH_SOURCE[0]}")/../profiles/gpus.json" "$inputs/gpus/gpus.json"
(
  cd "$inputs" || exit 1
  "$pipeplan" plan --model tiny --stages 2 -m 2 -o plan.json >/dev/null &&
    "$pipeplan" plan --model tiny --stages 2 -m 4 --schedule dualpipe -o dualpipe.json >/dev/null &&
    "$pipeplan" profile --analytic --model tiny --gpu h100 -o profile.json >/dev/null &&
    "$pipeplan" profile --analytic --model tiny --gpu a100 -o profile_a100.json >/dev/null
) || { echo "bad_inputs: could not make the inputs"; exit 1; }
cd "$inputs" || exit 1
sed 's/"layers": 4,/"layers": 1000000000,/' profile.json >profile_1e9_layers.json
sed 's/"gpu": "h100-sxm",$/"gpu": "h999",/' profile.json >profile_unknown_gpu.json
sed -E '0,/"forward_us": [0-9.e+-]+/s//"forward_us": 1e300/' profile.json >profile_absurd_time.json
sed -E '0,/"stash_bytes": [0-9]+/s//"stash_bytes": 9000000000000000000/' profile.json \
  >profile_absurd_stash.json
sed -E '0,/"forward_us": [0-9.e+-]+/s//"forward_us": 1e999/' profile.json >profile_1e999.json
head -c 200 profile.json >profile_malformed.json
sed -E '0,/"attention": "flash",/s//"attention": "flash", "overlap": {"efficiency": 2},/' profile.json \
  >profile_bad_overlap.json
sed -E '0,/"attention": "flash",/s//"attention": "flash", "sustained_load": {"devices": 0},/' profile.json \
  >profile_bad_sustained_load.json
sed -E '0,/"duration_values": \[/s//"duration_values": [1e999,/' plan.json >plan_1e999.json
sed 's/stages=0,1\\n/stages=0,1 replicas=3\\n/' plan.json >plan_replicas_3.json
cat >cfg/config.json <<'EOF'
{"model_type": "llama", "num_hidden_layers": 1000000000, "hidden_size": 64,
 "num_attention_heads": 4, "intermediate_size": 172, "vocab_size": 256,
 "max_position_embeddings": 32}
EOF
# Mixtures of experts: more experts than the limit, more per token than there are; a tiny one
# that plans but that no backend runs.
mkdir -p moe_many moe_greedy moe_tiny
moe='"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
 "intermediate_size": 96, "vocab_size": 256, "max_position_embeddings": 32'
echo "{$moe, \"num_local_experts\": 1000000000, \"num_experts_per_tok\": 2}" >moe_many/config.json
echo "{$moe, \"num_local_experts\": 4, \"num_experts_per_tok\": 5}" >moe_greedy/config.json
echo "{$moe, \"num_local_experts\": 4, \"num_experts_per_tok\": 2}" >moe_tiny/config.json
# A Mistral whose sliding window (16) is shorter than the planned sequence (32): it plans, and
# the runtime's attention, which sees every earlier token, refuses to run it.
mkdir -p swa
echo '{"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
 "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 256, "max_position_embeddings": 64,
 "sliding_window": 16}' >swa/config.json
"$pipeplan" plan --model swa/config.json --stages 2 -m 2 --seq 32 -o plan_swa.json >/dev/null ||
  { echo "bad_inputs: could not plan the sliding-window model"; exit 1; }
# A data-parallel plan (which run refuses) and its meta.data_parallel broken.
"$pipeplan" plan --model tiny --stages 2 -m 2 --data-parallel 2 -o plan_dp.json >/dev/null ||
  { echo "bad_inputs: could not plan with data parallelism"; exit 1; }
python3 - <<'PY' || { echo "bad_inputs: could not break the data-parallel plan"; exit 1; }
import json
plan = json.load(open("plan_dp.json"))
for name, field, value in (("optimizer", "optimizer", "zero3"), ("replicas", "replicas", 0),
                           ("link", "link", {"latency_us": 1, "bandwidth_GBps": 1e-9})):
    plan_copy = json.loads(json.dumps(plan))
    plan_copy["meta"]["data_parallel"][field] = value
    json.dump(plan_copy, open(f"plan_dp_bad_{name}.json", "w"))
PY
# A plan with activation recomputation, and its meta.recompute unknown.
"$pipeplan" plan --model tiny --stages 2 -m 2 --recompute full -o plan_recompute.json >/dev/null ||
  { echo "bad_inputs: could not plan with recomputation"; exit 1; }
python3 - <<'PY' || { echo "bad_inputs: could not break the recomputing plan"; exit 1; }
import json
plan = json.load(open("plan_recompute.json"))
plan["meta"]["recompute"] = {"method": "selective"}
json.dump(plan, open("plan_recompute_bad.json", "w"))
PY
cp "$fixtures/deadlock.csv" deadlock.csv
# Three stages on two ranks: rank 0 holds stages 0 and 2, rank 1 stage 1.
printf '0F0,2F0,2B0,0B0\n1F0,1B0\n' >uneven_stages.csv
# One rank holding 70 stages (each F, then each B in reverse): above the limit on chunks.
python3 -c 'print(",".join([f"{s}F0" for s in range(70)] + [f"{s}B0" for s in reversed(range(70))]))' >chunks70.csv
"$pipeplan" export plan.json -o sched.csv >/dev/null || { echo "bad_inputs: export failed"; exit 1; }
"$pipeplan" show plan.json --trace trace.json >/dev/null || { echo "bad_inputs: show failed"; exit 1; }
# A recorded run for calibrate: RUN.plan.json + RUN.trace.json.
cp plan.json run.plan.json && cp trace.json run.trace.json
# The plan as version 2 (one object per node), for the cases of that version below.
python3 "$plan_json" plan.json plan_v2.json || { echo "bad_inputs: could not write plan_v2.json"; exit 1; }
# Plans whose JSON loads but that cannot run; the gpus.json variants; a NUL byte; deep nesting.
python3 - <<'PY' || { echo "bad_inputs: could not break the plan"; exit 1; }
import copy, json
plan = json.load(open("plan.json"))
def write(name, p):
    json.dump(p, open(name, "w"))
# The plan file keeps its nodes as columns (docs/reference/plan-format.md, version 3).
COLUMNS = ("stream", "stage", "microbatch", "duration", "alloc_bytes", "free_bytes", "work_bytes",
           "bytes", "match")
p = copy.deepcopy(plan); p["data_edges"] += [3, 3]; write("plan_self_edge.json", p)
# An edge between two compute nodes turned back (inside one send/recv pair it would be no cycle).
p = copy.deepcopy(plan); e = p["data_edges"]; kinds = p["nodes"]["kind"]
a, b = next((e[k], e[k + 1]) for k in range(0, len(e), 2) if kinds[e[k]] == kinds[e[k + 1]] == "c")
p["data_edges"] += [b, a]; write("plan_cycle.json", p)
p = copy.deepcopy(plan); p["nodes"]["match"][p["nodes"]["kind"].index("s")] = 0
write("plan_send_without_recv.json", p)
p = copy.deepcopy(plan); p["meta"]["flops_per_token"] = 1e308; write("plan_flops_1e308.json", p)
# A recv whose own send waits for it; a recv holding bytes; a compute node freeing more than it has.
p = copy.deepcopy(plan); r = p["nodes"]["kind"].index("r")
p["data_edges"] += [r, p["nodes"]["match"][r]]; write("plan_recv_feeds_send.json", p)
p = copy.deepcopy(plan); p["nodes"]["alloc_bytes"][r] = 1 << 30; write("plan_recv_bytes.json", p)
p = copy.deepcopy(plan); t = p["nodes"]; t["free_bytes"][0] = t["alloc_bytes"][0] + 1
write("plan_over_free.json", p)
p = copy.deepcopy(plan); p["nodes"]["stage"][0] = 1; write("plan_bad_stage.json", p)
p = copy.deepcopy(plan); t = p["nodes"]; t["count"] += 1
for c in COLUMNS: t[c].append(t[c][0])
for c in ("kind", "op", "transfer"): t[c] += t[c][0]
write("plan_repeated_node.json", p)
p = copy.deepcopy(plan); t = p["nodes"]; t["count"] = 0; p["data_edges"] = []
for c in COLUMNS: t[c] = []
for c in ("kind", "op", "transfer"): t[c] = ""
for s in p["streams"]: s.pop("order", None)
write("plan_no_nodes.json", p)
for name, change in (("overlap", lambda m: m.update(stage_layers=[[0, 4], [2, 4]])),
                     ("gap", lambda m: m.update(stage_layers=[[0, 2], [3, 3]])),
                     ("1000_layers", lambda m: m["model"].update(layers=1000)),
                     ("seq_0", lambda m: m.update(seq=0))):
    p = copy.deepcopy(plan); change(p["meta"]); write("plan_layers_%s.json" % name, p)
p = copy.deepcopy(plan); p["schedule"] = p["schedule"].replace("0F0 0F1 0B0 0B1", "0F0 0B0 0F1 0B1")
assert p["schedule"] != plan["schedule"]; write("plan_schedule_text.json", p)
p = copy.deepcopy(plan); p["nodes"]["labels"] = [[0, "0F0\x1b[2J\"}"]]; write("plan_escape_label.json", p)
# Fields the reader must not take: an unknown key with "format" after it (the parser has not yet
# been told the file is a plan), the other version's edges, a compute node's message in version 2,
# half a byte of memory, a tensor-parallel degree that splits no heads, compute that takes no time.
v2 = json.load(open("plan_v2.json"))
def format_last(p):
    rest = {k: v for k, v in p.items() if k != "format"}
    rest["format"] = p["format"]
    return rest
p = copy.deepcopy(plan); p["meta"]["tensor_paralel"] = 4; write("plan_unknown_key_format_last.json", format_last(p))
p = copy.deepcopy(plan); p["meta"]["recompute"] = {"method": "block", "blocks": 1, "blcks": 2}
write("plan_unknown_recompute_key_format_last.json", format_last(p))
p = copy.deepcopy(v2); p["meta"]["tensor_paralel"] = 4; write("plan_v2_unknown_key_format_last.json", format_last(p))
p = copy.deepcopy(plan); p["edges"] = [[0, 1]]; write("plan_v3_edges.json", p)
p = copy.deepcopy(v2); p["data_edges"] = [0, 1]; write("plan_v2_data_edges.json", p)
p = copy.deepcopy(v2); p["nodes"][0]["bytes"] = 4096; write("plan_v2_compute_bytes.json", p)
p = copy.deepcopy(plan); p["meta"]["memory_limit_bytes"][0] = 0.5; write("plan_half_byte_limit.json", p)
p = copy.deepcopy(plan); p["meta"]["tensor_parallel"] = 3; write("plan_tp_3.json", p)
p = copy.deepcopy(plan); t = p["nodes"]; t["duration_values"] = [0] * len(t["duration_values"])
write("plan_no_time.json", p)
p = copy.deepcopy(plan); p["nodes"]["labels"] = [[99, "a"]]; write("plan_label_99.json", p)
p = copy.deepcopy(plan); p["streams"] = []; write("plan_no_streams.json", p)
text = json.dumps(plan).replace('"count": %d' % plan["nodes"]["count"], '"count": 99999999999999999999')
assert "99999999999999999999" in text; open("plan_count_1e20.json", "w").write(text)
prof = json.load(open("profile.json")); prof["model"]["name"] = "tiny\x1b]0;x\x07"
json.dump(prof, open("profile_escape_name.json", "w"))
gpus = json.load(open("gpus/gpus.json"))
g = copy.deepcopy(gpus); g["gpus"][0]["hbm_gib"] = 1e-9
json.dump(g, open("gpus_tiny_hbm/gpus.json", "w"))
g = copy.deepcopy(gpus); g["gpus"][0]["peak_bf16_tflops"] = 1e300
json.dump(g, open("gpus_absurd_peak/gpus.json", "w"))
entry = gpus["gpus"][0]
g = {"format": "pipeplan-gpus", "version": 1, "gpus": []}
for i in range(20000):
    e = dict(entry); e["name"] = "gpu%d" % i; e["aliases"] = []
    g["gpus"].append(e)
json.dump(g, open("gpus_20k/gpus.json", "w"))
g = copy.deepcopy(gpus); g["gpus"] = [e for e in g["gpus"] if e["name"] != "cpu"]
json.dump(g, open("gpus_no_cpu/gpus.json", "w"))
# An analytic profile with working memory in it (as calibrate working-memory writes one).
p = json.load(open("profile.json"))
for by_mbs in p["layers"].values():
    for cost in by_mbs.values():
        cost["forward_work_bytes"] = cost["p1_work_bytes"] = 1024
write("profile_analytic_work.json", p)
open("plan_nul.json", "wb").write(open("plan.json", "rb").read() + b"\0garbage")
trace = json.load(open("trace.json"))
text = json.dumps(trace)
deep = "[" * 53000 + "]" * 53000
marker = '"node": '
at = text.index(marker) + len(marker)
end = at
while text[end].isdigit():
    end += 1
open("trace_deep.json", "w").write(text[:at] + deep + text[end:])
# Measured traces that contradict the plan: a slice on the other device, one named after another
# node, two compute slices of one stream at once.
def broken_trace(name, change):
    t = copy.deepcopy(trace)
    slices = {e["name"]: e for e in t["traceEvents"] if e["ph"] == "X"}
    change(slices)
    json.dump(t, open(name, "w"))
broken_trace("trace_swapped_pid.json", lambda s: s["0F0"].update(pid=2))
broken_trace("trace_wrong_name.json", lambda s: s["0F0"].update(name="1B1"))
broken_trace("trace_overlap.json", lambda s: s["0F1"].update(ts=s["0F0"]["ts"] + 1))
open("run_overlap.plan.json", "w").write(open("plan.json").read())
open("run_overlap.trace.json", "w").write(open("trace_overlap.json").read())
PY
for f in profile_1e9_layers profile_unknown_gpu profile_absurd_time profile_absurd_stash \
  profile_1e999 plan_1e999; do
  cmp -s "$f.json" profile.json && { echo "bad_inputs: $f.json is not broken"; exit 1; }
done

failures=0
cases=0
# Every entry of a folder: its type, where a link points, and a regular file's checksum.
snapshot() {
  (cd "$1" && find . -printf '%y %p %l\n' | sort &&
    find . -type f -exec md5sum {} + | sort -k 2)
}
# check NAME ARGS...: runs pipeplan ARGS in a copy of the inputs; {out} is a file that must not
# appear. EXPECT, when set, is text the one line must contain (EXPECT='...' check NAME ARGS...).
check() {
  local name=$1
  shift
  cases=$((cases + 1))
  local dir=$work/case$cases
  cp -r "$inputs" "$dir"
  local args=()
  for a in "$@"; do args+=("${a//\{out\}/$dir/out.file}"); done
  local before after start end status output lines
  # SETUP, when set, runs in the case's folder first (a FIFO, a link, a folder to plant).
  if [ -n "${SETUP:-}" ]; then (cd "$dir" && eval "$SETUP") || echo "bad_inputs: setup of '$name' failed"; fi
  before=$(snapshot "$dir")
  start=$(date +%s.%N)
  output=$(cd "$dir" && timeout "$limit" "$pipeplan" "${args[@]}" 2>&1)
  status=$?
  end=$(date +%s.%N)
  after=$(snapshot "$dir")
  lines=$(printf '%s\n' "$output" | wc -l)
  local why=""
  if [ "$status" -eq 124 ]; then
    why="no answer within ${limit} s"
  elif [ "$status" -eq 0 ]; then
    why="exit 0"
  elif [ -z "$output" ] || [ "$lines" -ne 1 ]; then
    why="$lines lines of output"
  elif [[ $output == *"internal error"* ]]; then
    why="internal error"
  elif [ "$before" != "$after" ]; then
    why="changed $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | tr '\n' ' ' | cut -c1-300)"
  elif [ -n "${EXPECT:-}" ] && [[ $output != *"$EXPECT"* ]]; then
    why="the message lacks '$EXPECT'"
  fi
  local seconds
  seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')
  if [ -n "$why" ]; then
    failures=$((failures + 1))
    printf 'FAIL %-44s %s (%.2f s): %s\n' "$name" "$why" "$seconds" "${output:0:300}"
  else
    printf 'ok   %-44s %.2f s  %s\n' "$name" "$seconds" "${output:0:140}"
  fi
  rm -rf "$dir"
}

# Hangs with no message.
EXPECT='--microbatches: 1000000000 is above the limit of 65536' \
  check "plan -m 1e9" plan --model tiny --stages 2 -m 1000000000 -o '{out}'
check "plan: profile with 1e9 layers" plan --profile profile_1e9_layers.json --stages 2 -m 2 -o '{out}'
check "compare: profile with 1e9 layers" compare --profile profile_1e9_layers.json --stages 2 -m 2
check "bpipe: profile with 1e9 layers" bpipe --profile profile_1e9_layers.json --stages 2 --global-batch 8
check "plan: HF config with 1e9 layers" plan --model cfg/config.json --stages 2 -m 2 -o '{out}'
check "compare: HF config with 1e9 layers" compare --model cfg/config.json --stages 2 -m 2
check "bpipe: HF config with 1e9 layers" bpipe --model cfg/config.json --stages 2 --global-batch 8
check "plan --p2-concat with backward fused" plan --model tiny --stages 2 -m 2 --backward fused --p2-concat 2 -o '{out}'
check "plan --p2-concat on a family placing its own p2" plan --model tiny --stages 2 -m 4 --schedule zb-h1 --p2-concat 2 -o '{out}'
EXPECT='--stages: 4 devices x 2 virtual stages each (zb-v) = 8 stages but tiny has 4 blocks' \
  check "plan: zb-v with more virtual stages than blocks" plan --model tiny --stages 4 -m 8 --schedule zb-v -o '{out}'
EXPECT='for parameters, gradients and optimizer state, above its limit' \
  check "plan: auto where the parameters alone break the limit" plan --model llama-7b --stages 4 -m 8 --schedule auto --memory 30GiB -o '{out}'
check "plan: MoE config with 1e9 experts" plan --model moe_many/config.json --stages 2 -m 2 -o '{out}'
check "plan: MoE config with more experts per token than experts" plan --model moe_greedy/config.json --stages 2 -m 2 -o '{out}'
check "profile --backend cpu of an MoE model" profile --backend cpu --model moe_tiny/config.json -o '{out}'
EXPECT='--global-batch: 2147483647 is above the limit of 16777216' \
  check "bpipe --global-batch 2147483647" bpipe --model tiny --stages 2 --global-batch 2147483647
EXPECT='--width: 2147483647 is above the limit of 10000' \
  check "show --width 2147483647" show plan.json --width 2147483647 --trace '{out}'
EXPECT='--max-concat: 100000000 is above the limit of 65536' \
  check "profile --max-concat 100000000" profile --analytic --model tiny --max-concat 100000000 -o '{out}'
EXPECT='--max-concat: 100000000 is above the limit of 64' \
  check "profile --backend cpu --max-concat 100000000" profile --backend cpu --model tiny --max-concat 100000000 -o '{out}'
check "profile --backend cpu --mbs 0" profile --backend cpu --model tiny --mbs 0 -o '{out}'
EXPECT='--seq: must be at least 1' \
  check "profile --backend cpu --seq 0" profile --backend cpu --model tiny --seq 0 -o '{out}'
EXPECT='--steps: 2147483647 is above the limit of 10000' \
  check "run --steps 2147483647" run plan.json --steps 2147483647 --trace '{out}'
# Nonsense accepted with exit 0.
EXPECT='--seq: must be at least 1' \
  check "plan --seq 0" plan --model tiny --stages 2 -m 2 --seq 0 -o '{out}'
check "plan --memory 1e30GiB" plan --model tiny --stages 2 -m 2 --memory 1e30GiB -o '{out}'
EXPECT='--memory: must not be empty' \
  check "plan --memory ''" plan --model tiny --stages 2 -m 2 --memory '' -o '{out}'
EXPECT='--uniform: 1e+308 ms is above the limit of 1000000 ms' \
  check "plan --uniform 1e308:..." plan --uniform 1e308:1:1:0 --stages 2 -m 2 -o '{out}'
EXPECT='--tensor-parallel: 3 does not divide the 4 attention heads of tiny' \
  check "plan --tensor-parallel 3 with 4 heads" plan --model tiny --stages 2 -m 2 --tensor-parallel 3 -o '{out}'
EXPECT='--data-parallel: must be at least 1' \
  check "plan --data-parallel 0" plan --model tiny --stages 2 -m 2 --data-parallel 0 -o '{out}'
EXPECT='--data-parallel: 2000000 is above the limit of 1048576' \
  check "plan --data-parallel 2000000" plan --model tiny --stages 2 -m 2 --data-parallel 2000000 -o '{out}'
EXPECT="--dp-optimizer: must be 'sharded' or 'replicated', got 'zero3'" \
  check "plan --dp-optimizer zero3" plan --model tiny --stages 2 -m 2 --data-parallel 2 --dp-optimizer zero3 -o '{out}'
EXPECT='--dp-link-bandwidth: needs --data-parallel above 1' \
  check "plan --dp-link-bandwidth without replicas" plan --model tiny --stages 2 -m 2 --dp-link-bandwidth 50 -o '{out}'
EXPECT='--dp-link-bandwidth = 1e-09 is neither 0' \
  check "plan --dp-link-bandwidth 1e-9" plan --model tiny --stages 2 -m 2 --data-parallel 2 --dp-link-bandwidth 1e-9 -o '{out}'
EXPECT="--dp-link-latency: '-1' is not a number from 0 to" \
  check "plan --dp-link-latency -1" plan --model tiny --stages 2 -m 2 --data-parallel 2 --dp-link-latency -1 -o '{out}'
EXPECT='--global-batch: 6 samples do not divide among --data-parallel 4 replicas' \
  check "plan --search --global-batch 6 over 4 replicas" plan --model tiny --stages 2 --search --global-batch 6 --data-parallel 4 -o '{out}'
EXPECT='--global-batch: 6 samples do not divide among --data-parallel 4 replicas' \
  check "bpipe --data-parallel not dividing the global batch" bpipe --model tiny --stages 2 --global-batch 6 --data-parallel 4
EXPECT='plan_dp.json: planned with data parallelism 2' \
  check "run: a data-parallel plan" run plan_dp.json --trace '{out}'
EXPECT="plan_dp_bad_optimizer.json: meta.data_parallel: field 'optimizer': must be 'sharded' or 'replicated', got 'zero3'" \
  check "show: meta.data_parallel.optimizer zero3" show plan_dp_bad_optimizer.json --trace '{out}'
EXPECT="field 'replicas'" \
  check "show: meta.data_parallel.replicas 0" show plan_dp_bad_replicas.json --trace '{out}'
EXPECT="field 'bandwidth_GBps'" \
  check "show: meta.data_parallel.link bandwidth 1e-9" show plan_dp_bad_link.json --trace '{out}'
EXPECT="--recompute: must be none, full, auto or a block count from 1 to 1024, got 'selective'" \
  check "plan --recompute selective" plan --model tiny --stages 2 -m 2 --recompute selective -o '{out}'
EXPECT="--recompute: must be none, full, auto or a block count from 1 to 1024, got '0'" \
  check "plan --recompute 0" plan --model tiny --stages 2 -m 2 --recompute 0 -o '{out}'
EXPECT='--memory: ' \
  check "plan --recompute auto that nothing fits" plan --model tiny --stages 2 -m 2 --memory 1KiB --reserve 0 --recompute auto -o '{out}'
EXPECT="--baseline-recompute: must be none, full, auto or a block count from 1 to 1024, got 'some'" \
  check "bpipe --baseline-recompute some" bpipe --model tiny --stages 2 --global-batch 4 --baseline-recompute some
EXPECT="plan_recompute_bad.json: meta.recompute: field 'method' must be \"none\", \"full\" or \"block\", got 'selective'" \
  check "show: meta.recompute selective" show plan_recompute_bad.json --trace '{out}'
EXPECT="--overlap-efficiency: '1.5' is not a number from 0 to 1" \
  check "plan --overlap-efficiency 1.5" plan --model tiny --stages 2 -m 4 --schedule dualpipe-v --overlap-efficiency 1.5 -o '{out}'
EXPECT="--overlap-efficiency: 'nan' is not a number from 0 to 1" \
  check "plan --overlap-efficiency nan" plan --model tiny --stages 2 -m 4 --schedule dualpipe-v --overlap-efficiency nan -o '{out}'
EXPECT="--microbatches: schedule 'dualpipe-v' needs at least 2P = 4 micro-batches" \
  check "plan dualpipe-v, m below 2P" plan --model tiny --stages 2 -m 3 --schedule dualpipe-v -o '{out}'
EXPECT="--stages: schedule 'dualpipe' needs an even number of devices, got 3" \
  check "plan dualpipe, odd device count" plan --model tiny --stages 3 -m 6 --schedule dualpipe -o '{out}'
EXPECT="--microbatches: schedule 'dualpipe' needs an even number of at least 2P = 4 micro-batches" \
  check "plan dualpipe, odd micro-batch count" plan --model tiny --stages 2 -m 5 --schedule dualpipe -o '{out}'
check "export: dualpipe plan to torch CSV" export dualpipe.json --format torch-csv -o '{out}'
check "validate: schedule with replicas=3" validate plan_replicas_3.json
EXPECT='--output: must not be empty' \
  check "plan -o ''" plan --model tiny --stages 2 -m 2 -o ''
check "plan: profile naming an unknown GPU" plan --profile profile_unknown_gpu.json --stages 2 -m 2 -o '{out}'
check "plan: profile with absurd times" plan --profile profile_absurd_time.json --stages 2 -m 2 -o '{out}'
check "plan: profile with overlap efficiency 2" plan --profile profile_bad_overlap.json --stages 2 -m 2 -o '{out}'
check "plan: profile with a load run of 0 devices" plan --profile profile_bad_sustained_load.json --stages 2 -m 2 -o '{out}'
check "profile --sustain-seconds -1" profile --backend cuda --model tiny --sustain-seconds -1 -o '{out}'
check "profile --sustain-seconds 0x10" profile --backend cuda --model tiny --sustain-seconds 0x10 -o '{out}'
check "profile --cooldown-seconds 1e9" profile --backend cuda --model tiny --cooldown-seconds 1e9 -o '{out}'
EXPECT="must be a finite decimal number above 0" check "profile --max-host-gib 0x10" profile --backend cpu --model tiny --max-host-gib 0x10 -o '{out}'
EXPECT="must be a finite decimal number above 0" check "run --max-host-gib ' 8'" run plan.json --max-host-gib ' 8'
EXPECT="65 sizes given, above the limit of 64" check "profile --backend cpu: 65 sizes" profile --backend cpu --model tiny --mbs "$(seq -s, 1 65)" -o '{out}'
EXPECT="no analytic estimate for it" check "profile --analytic --gpu cpu" profile --analytic --model tiny --gpu cpu -o '{out}'
EXPECT="is a pipeplan-profile file, not a model" check "profile --model PROFILE" profile --analytic --model profile.json -o '{out}'
check "profile --analytic --sustain-seconds 5" profile --analytic --model tiny --sustain-seconds 5 -o '{out}'
check "plan: profile with absurd stash sizes" plan --profile profile_absurd_stash.json --stages 2 -m 2 -o '{out}'
EXPECT='--width: must be at least 1' \
  check "show --width -5" show plan.json --width -5 --trace '{out}'
EXPECT="--width: 10 is too narrow for this plan's timeline (15 columns at least)" \
  check "show --width 10" show plan.json --width 10 --trace '{out}'
EXPECT="field 'flops_per_token' (1e+308) is above the limit of" \
  check "show: meta.flops_per_token 1e308" show plan_flops_1e308.json --trace '{out}'
EXPECT='its matched send waits for it (an edge from the recv to its send) (rule acyclic)' \
  check "show: a recv feeding its own send" show plan_recv_feeds_send.json --trace '{out}'
EXPECT='is a transfer with alloc, free or work bytes' \
  check "validate: a recv holding bytes" validate plan_recv_bytes.json
EXPECT="bytes more than device 0's ops allocated before it (rule memory)" \
  check "validate: a node freeing more than its device allocated" validate plan_over_free.json
EXPECT="--max-host-gib: 'nan' must be a finite decimal number above 0" \
  check "run --max-host-gib nan" run plan.json --max-host-gib nan --trace '{out}'
EXPECT='--top: must be at least 0' \
  check "diff --top -1" diff plan.json plan.json --top -1
EXPECT='--mbs-list: must not be empty' \
  check "bpipe --mbs-list ''" bpipe --model tiny --stages 2 --global-batch 8 --mbs-list ''
EXPECT='--mbs-list: profile.json has no cost at micro-batch size 64' \
  check "bpipe --mbs-list the profile does not hold" bpipe --profile profile.json --stages 2 --global-batch 64 --mbs-list 64
EXPECT='--stages: BPipe pairs stage x with stage P - 1 - x: needs at least 2, got 1' \
  check "bpipe: one stage" bpipe --model tiny --stages 1 --global-batch 8
EXPECT='--bpipe: needs at least 2 stages (it pairs stage x with stage P - 1 - x)' \
  check "plan --bpipe on: one stage" plan --model tiny --stages 1 -m 4 --bpipe on -o '{out}'
EXPECT='--stages: must be at least 1' \
  check "compare: 0 stages" compare --model tiny --stages 0 -m 2
EXPECT='--microbatches: must be at least 1' \
  check "compare: 0 micro-batches" compare --model tiny --stages 2 -m 0
EXPECT="--model: unknown model 'llama-99b'" \
  check "compare: unknown model" compare --model llama-99b --stages 2 -m 2
EXPECT="--uniform: 'nan' is not a number" \
  check "compare: NaN costs" compare --uniform nan:1:1:0 --stages 2 -m 2
EXPECT="--memory: '12XB' is not a size" \
  check "compare --memory 12XB" compare --model tiny --stages 2 -m 2 --memory 12XB
check "compare: malformed profile" compare --profile profile_malformed.json --stages 2 -m 2
# Internal errors: numbers beyond a double.
check "plan: profile with 1e999" plan --profile profile_1e999.json --stages 2 -m 2 -o '{out}'
check "show: plan with 1e999" show plan_1e999.json --trace '{out}'
check "validate: plan with 1e999" validate plan_1e999.json
check "run: plan with 1e999" run plan_1e999.json --trace '{out}'
check "export: plan with 1e999" export plan_1e999.json -o '{out}'
check "diff: plan with 1e999" diff plan.json plan_1e999.json
EXPECT="trace.json: a trace (it has 'traceEvents' and no 'format'), not a 'pipeplan-plan' file" \
  check "diff: trace and plan swapped" diff trace.json plan.json
EXPECT="not a 'pipeplan-plan' file" check "show: a trace" show trace.json
# CLI11's two-line messages.
check "unknown subcommand" frobnicate
check "unknown option" plan --model tiny --stages 2 -m 2 --frobnicate -o '{out}'
check "unknown option before a missing one" plan --frobnicate
# PyTorch interop.
check "import: deadlocking CSV" import deadlock.csv --uniform 1:1:1:0 -o '{out}'
check "import --bpipe on" import sched.csv --model tiny --bpipe on -o '{out}'
check "import --bpipe auto" import sched.csv --model tiny --bpipe auto -o '{out}'
check "import --p2-concat without --join-w" import sched.csv --model tiny --p2-concat 2 -o '{out}'
EXPECT='--stages: must be at least 1' \
  check "import --stages 0" import sched.csv --model tiny --stages 0 -o '{out}'
EXPECT='--microbatches: must be at least 1' \
  check "import -m 0" import sched.csv --model tiny -m 0 -o '{out}'
EXPECT='chunks70.csv: 70 stages on 1 rank are 70 per rank, above the limit of 64' \
  check "import: CSV with 70 stages on one rank" import chunks70.csv --model tiny -o '{out}'
# Outputs that would destroy an input or something that is not a regular file.
EXPECT='profile.json: cannot write: it is an input of this command' \
  check "plan -o onto its --profile" plan --profile profile.json --stages 2 -m 2 -o profile.json
EXPECT='plan.json: cannot write: it is an input of this command' \
  check "export -o onto its plan" export plan.json -o plan.json
EXPECT='sched.csv: cannot write: it is an input of this command' \
  check "import -o onto its CSV" import sched.csv --model tiny -o sched.csv
EXPECT='plan.json: cannot write: it is an input of this command' \
  check "show --trace onto its plan" show plan.json --trace plan.json
EXPECT='plan.json: cannot write: it is an input of this command' \
  check "run --trace onto its plan" run plan.json --trace plan.json
SETUP='ln -s plan.json alias.json' check "show --trace onto a link to its plan" show plan.json --trace alias.json
check "show --trace and --dot onto one file" show plan.json --trace trace.json --dot trace.json
check "show --dot in a missing folder" show plan.json --trace trace.json --dot missing/g.dot
check "export -o a folder" export plan.json -o cfg
check "run --trace in a missing folder" run plan.json --trace missing/x.json
check "export -o -" export plan.json -o -
check "import -o -" import sched.csv --model tiny -o -
check "export -o a file's name and '/'" export plan.json -o plan.json/
SETUP='ln -s /dev/null devnull' check "plan -o a link to /dev/null" plan --model tiny --stages 2 -m 2 -o devnull
SETUP='mkfifo out.fifo' check "plan -o a FIFO" plan --model tiny --stages 2 -m 2 -o out.fifo
check "plan -o a folder" plan --model tiny --stages 2 -m 2 -o cfg
# Inputs that are not regular files or not text.
SETUP='mkfifo fifo.json' check "show: a FIFO as the plan" show fifo.json
SETUP='mkfifo gpus/gpus.json.fifo && mv gpus/gpus.json.fifo gpus/gpus.json' \
  PIPEPLAN_DATA_DIR=gpus check "plan: a FIFO as gpus.json" plan --model tiny --stages 2 -m 2 -o '{out}'
check "show /dev/zero" show /dev/zero
check "show - from /dev/zero" show - </dev/zero
check "diff - -: standard input twice" diff - - <plan.json
check "show -: a truncated plan piped in" show - < <(head -c 300 plan.json)
check "plan --profile /dev/urandom" plan --profile /dev/urandom --stages 2 -m 2 -o '{out}'
check "show: a NUL byte in the plan" show plan_nul.json
check "diff: args.node nested 53,000 deep" diff plan.json trace_deep.json
check "diff: a slice on the other device" diff plan.json trace_swapped_pid.json
check "diff: a slice named after another node" diff plan.json trace_wrong_name.json
check "diff: two compute slices of one stream at once" diff plan.json trace_overlap.json
check "calibrate fit: a run whose trace contradicts its plan" calibrate fit --profile profile.json -o '{out}' run_overlap
PIPEPLAN_DATA_DIR=gpus_20k check "plan: 20,000 GPUs in gpus.json" plan --model tiny --stages 2 -m 2 -o '{out}'
PIPEPLAN_DATA_DIR=gpus_tiny_hbm check "plan: gpus.json hbm_gib 1e-9" plan --model tiny --stages 2 -m 2 -o '{out}'
PIPEPLAN_DATA_DIR=gpus_absurd_peak check "plan: gpus.json peak 1e300" plan --model tiny --stages 2 -m 2 -o '{out}'
# Control characters in names and labels (a terminal would act on them; DOT would break).
check "show: ESC in a node label" show plan_escape_label.json --dot '{out}'
check "plan: ESC in a profile's model name" plan --profile profile_escape_name.json --stages 2 -m 2 -o '{out}'
# Plans validate must refuse, and export with them.
for bad in self_edge cycle send_without_recv bad_stage repeated_node no_nodes layers_overlap \
  layers_gap layers_1000_layers layers_seq_0 schedule_text; do
  check "validate: plan_$bad" validate "plan_$bad.json"
  check "export: plan_$bad" export "plan_$bad.json" -o '{out}'
done
EXPECT="field 'meta.tensor_paralel' is not a field of a plan's meta (did you mean 'tensor_parallel'?)" \
  check "validate: unknown meta key, format last" validate plan_unknown_key_format_last.json
EXPECT="field 'meta.recompute.blcks' is not a field of a plan's recomputation" \
  check "validate: unknown recompute key, format last" validate plan_unknown_recompute_key_format_last.json
EXPECT="field 'meta.tensor_paralel' is not a field of a plan's meta" \
  check "validate: v2 unknown meta key, format last" validate plan_v2_unknown_key_format_last.json
EXPECT="field 'edges' is a version 1 and 2 field; version 3 plans give 'data_edges'" \
  check "validate: v3 plan with edges" validate plan_v3_edges.json
EXPECT="field 'data_edges' is a version 3 field; version 2 plans give 'edges'" \
  check "validate: v2 plan with data_edges" validate plan_v2_data_edges.json
EXPECT="nodes[0]: field 'bytes' is 4096 on a compute node" \
  check "validate: v2 compute node with bytes" validate plan_v2_compute_bytes.json
EXPECT="field 'memory_limit_bytes' must hold byte counts, 0 (no limit) or 1" \
  check "validate: memory limit of half a byte" validate plan_half_byte_limit.json
EXPECT="meta: field 'tensor_parallel': 3 does not divide the 4 attention heads of tiny" \
  check "validate: tensor parallel 3 on 4 heads" validate plan_tp_3.json
EXPECT="node 0: field 'duration' is 0 us for a compute F" \
  check "show: compute that takes no time" show plan_no_time.json
EXPECT="field 'nodes.labels[0]' names node 99, out of range [0, 17]" \
  check "validate: a label for node 99" validate plan_label_99.json
EXPECT="field 'streams' is empty, but the plan has 18 nodes, each on a stream" \
  check "validate: no streams" validate plan_no_streams.json
EXPECT="nodes: field 'count' = 1e+20 is out of range [0, 4194304]" \
  check "validate: a count of 99999999999999999999" validate plan_count_1e20.json
# Accepted nonsense and unclear messages.
check "plan --gpu a100 on an H100 profile" plan --profile profile.json --gpu a100 --stages 2 -m 2 -o '{out}'
check "profile --analytic --backend cuda" profile --analytic --model tiny --backend cuda -o '{out}'
EXPECT="--backend: 'bogus' is not cuda or cpu" \
  check "profile --analytic --backend bogus" profile --analytic --model tiny --backend bogus -o '{out}'
check "plan --memory 0x10GiB" plan --model tiny --stages 2 -m 2 --memory 0x10GiB -o '{out}'
check "plan --memory -0GiB" plan --model tiny --stages 2 -m 2 --memory -0GiB -o '{out}'
check "plan -m 0x2" plan --model tiny --stages 2 -m 0x2 -o '{out}'
EXPECT="--seed: '-1' must not be negative" \
  check "run --seed -1" run plan.json --seed -1 --trace '{out}'
check "run --seed 2^64" run plan.json --seed 18446744073709551616 --trace '{out}'
check "run --seed 99999999999999999999" run plan.json --seed 99999999999999999999 --trace '{out}'
check "run --transport nccl on the CPU" run plan.json --transport nccl --trace '{out}'
EXPECT="--transport: unknown transport 'carrier-pigeon'" \
  check "run --transport carrier-pigeon" run plan.json --backend cuda --transport carrier-pigeon --trace '{out}'
check "run --transport device-local, no --emulate" run plan.json --backend cuda --transport device-local --trace '{out}'
EXPECT="--attention: unknown attention 'sparse'" \
  check "plan --attention sparse" plan --model tiny --stages 2 -m 2 --attention sparse -o '{out}'
EXPECT='--global-batch: must be at least 1' \
  check "plan --search --global-batch 0" plan --model tiny --stages 2 --search --global-batch 0 -o '{out}'
check "bpipe --stages 16 on tiny" bpipe --model tiny --stages 16 --global-batch 8
check "plan --memory 300KiB --reserve 0" plan --model tiny --stages 2 -m 2 --memory 300KiB --reserve 0 -o '{out}'
check "compare: no schedule fits" compare --model tiny --stages 9 -m 9
# calibrate: missing and mismatched inputs, flags that contradict, outputs onto inputs.
check "calibrate fit: a run that is not there" calibrate fit --profile profile.json -o '{out}' missing
check "calibrate fit -o onto its profile" calibrate fit --profile profile.json -o profile.json run
check "calibrate fit -o onto a run's trace" calibrate fit --profile profile.json -o run.trace.json run
EXPECT='--copy-only: keeps the compute curves, which --sustained fits' \
  check "calibrate fit --sustained --copy-only" calibrate fit --sustained --copy-only --profile profile.json -o '{out}' run
check "calibrate fit --copy-only without contention" calibrate fit --copy-only --profile profile.json -o '{out}' run
EXPECT="--max-factor: '-1' must be a finite decimal number above -1" \
  check "calibrate fit --max-factor -1" calibrate fit --sustained --max-factor -1 --profile profile.json -o '{out}' run
EXPECT='--time-constants-ms: 0 is not in (0, 1e+06]' \
  check "calibrate fit --time-constants-ms 30,0" calibrate fit --sustained --time-constants-ms 30,0 --profile profile.json -o '{out}' run
EXPECT='--min-ops: must be at least 1' \
  check "calibrate fit --min-ops 0" calibrate fit --min-ops 0 --profile profile.json -o '{out}' run
check "calibrate fit --overlap without pairs" calibrate fit --overlap --profile profile.json -o '{out}' run
check "calibrate eval: a profile that is not there" calibrate eval --profile missing.json run
SETUP="echo '# command: pipeplan show x' >run.plan.txt" \
  EXPECT="run.plan.txt: the recorded command is not 'pipeplan plan'" \
  check "calibrate eval: a recorded command that is not plan" calibrate eval --profile profile.json run
check "calibrate copy: from a profile without contention" calibrate copy --from profile.json -o '{out}' profile.json
check "calibrate copy -o onto its input" calibrate copy --from profile.json -o profile.json profile.json
check "calibrate working-memory: none measured" calibrate working-memory --from profile.json -o '{out}' profile.json
check "calibrate working-memory: from a plan" calibrate working-memory --from plan.json -o '{out}' profile.json
check "calibrate: no subcommand" calibrate
check "profile --backend cpu --model llama-65b" profile --backend cpu --model llama-65b -o '{out}'
PIPEPLAN_DATA_DIR=gpus_no_cpu check "profile --backend cpu: gpus.json without cpu" profile --backend cpu --model tiny -o '{out}'
check "plan --layout with a non-ASCII character" plan --model tiny --stages 2 -m 2 --layout 'Ett|ttéL' -o '{out}'
WORLD_SIZE=abc check "run: WORLD_SIZE=abc" run plan.json --trace '{out}'
OMPI_COMM_WORLD_SIZE=abc check "run: OMPI_COMM_WORLD_SIZE=abc" run plan.json --trace '{out}'
SLURM_NTASKS=-3 check "run: SLURM_NTASKS=-3" run plan.json --trace '{out}'
check "calibrate working-memory: from an analytic profile" calibrate working-memory --from profile_analytic_work.json -o '{out}' profile.json
EXPECT='--min-factor: only with --sustained' \
  check "calibrate fit --min-factor without --sustained" calibrate fit --min-factor 0.5 --profile profile.json -o '{out}' run
# Options that a mode or an input decides, given beside it.
check "plan --attention beside a profile's" plan --profile profile.json --stages 2 -m 2 --attention materialized -o '{out}'
EXPECT='--attention: --uniform gives the times' \
  check "plan --uniform --attention" plan --uniform 1:1:1:0 --stages 2 -m 2 --attention flash -o '{out}'
EXPECT='--seq: --uniform gives the times' \
  check "plan --uniform --seq" plan --uniform 1:1:1:0 --stages 2 -m 2 --seq 64 -o '{out}'
EXPECT='--layout: --search chooses the chunks and the split itself' \
  check "plan --search --layout" plan --model tiny --stages 2 --search --global-batch 8 --layout 'Et|tttL' -o '{out}'
EXPECT='--chunks: --search chooses the chunks and the split itself' \
  check "plan --search --chunks" plan --model tiny --stages 2 --search --global-batch 8 --chunks 2 -o '{out}'
EXPECT="--chunks: schedule 'auto' chooses its chunks per device itself (one or two), got 2; leave --chunks out" \
  check "plan --schedule auto --chunks" plan --uniform 1:1:1:0 --stages 4 -m 8 --schedule auto --chunks 2 -o '{out}'
EXPECT="--chunks: schedule 'auto' chooses its chunks per device itself (one or two), got 1; leave --chunks out" \
  check "plan --schedule auto --chunks 1" plan --uniform 1:1:1:0 --stages 4 -m 8 --schedule auto --chunks 1 -o '{out}'
EXPECT='--link-latency: --uniform gives each transfer' \
  check "plan --uniform --link-latency" plan --uniform 1:2:1:0.1 --stages 4 -m 8 --link-latency 10 -o '{out}'
EXPECT='--link-bandwidth: --uniform gives each transfer' \
  check "plan --uniform --link-bandwidth" plan --uniform 1:2:1:0.1 --stages 4 -m 8 --link-bandwidth 0.001 -o '{out}'
EXPECT="--memory: '2PiB' is above the limit of 1 PiB per device" \
  check "plan --memory 2PiB" plan --model tiny --stages 2 -m 2 --memory 2PiB -o '{out}'
EXPECT="--memory: '80' has no unit (80GiB, 80GB or 80B for bytes)" \
  check "plan --memory 80" plan --model tiny --stages 2 -m 2 --memory 80 -o '{out}'
EXPECT="--reserve: '0.5' has no unit" \
  check "plan --reserve 0.5" plan --model tiny --stages 2 -m 2 --reserve 0.5 -o '{out}'
EXPECT="--layout: stage 0 ('garbage') holds 'g', not a layer type" \
  check "plan --layout garbage --stages 4" plan --model tiny --stages 4 -m 8 --layout garbage -o '{out}'
EXPECT="--objective: what --schedule auto chooses by; schedule '1f1b' is given" \
  check "plan --schedule 1f1b --objective steady" plan --model tiny --stages 2 -m 4 --schedule 1f1b --objective steady -o '{out}'
EXPECT="--auto-copies: what --schedule auto chooses by" \
  check "plan --schedule zb-v --auto-copies 1" plan --model tiny --stages 2 -m 4 --schedule zb-v --auto-copies 1 -o '{out}'
EXPECT="--overlap-efficiency: schedule '1f1b' overlaps no pair of ops" \
  check "plan --schedule 1f1b --overlap-efficiency" plan --model tiny --stages 2 -m 4 --schedule 1f1b --overlap-efficiency 0.3 -o '{out}'
EXPECT='--p2-concat: concatenates deferred p2s, and backward fused defers none' \
  check "plan --search --backward fused --p2-concat" plan --model tiny --stages 2 -m 8 --search --backward fused --p2-concat 2 -o '{out}'
check "plan --search --global-batch -m" plan --model tiny --stages 2 --search --global-batch 8 -m 4 -o '{out}'
check "plan --search --search-mbs, no --global-batch" plan --model tiny --stages 2 --search -m 4 --search-mbs 1,2 -o '{out}'
check "plan --search --bpipe auto" plan --model tiny --stages 2 --search --bpipe auto --global-batch 8 -o '{out}'
EXPECT='--global-batch: only with --search or --bpipe auto' \
  check "plan --global-batch without --search" plan --model tiny --stages 2 -m 4 --global-batch 8 -o '{out}'
EXPECT='--search-mbs: only with --search or --bpipe auto' \
  check "plan --search-mbs without --search" plan --model tiny --stages 2 -m 4 --search-mbs 1,2 -o '{out}'
EXPECT='--schedule: --bpipe auto plans 1f1b, not gpipe' \
  check "plan --bpipe auto --schedule gpipe" plan --model tiny --stages 2 --bpipe auto --global-batch 8 --schedule gpipe -o '{out}'
EXPECT='--backward: --bpipe auto tries every backward mode' \
  check "plan --bpipe auto --backward 2bp" plan --model tiny --stages 2 --bpipe auto --global-batch 8 --backward 2bp -o '{out}'
check "plan --memory 0 --reserve 10GiB" plan --model tiny --stages 2 -m 2 --memory 0 --reserve 10GiB -o '{out}'
check "plan --uniform --reserve, no --memory" plan --uniform 1:1:1:0 --stages 2 -m 2 --reserve 1GiB -o '{out}'
check "compare --bpipe auto" compare --model tiny --stages 2 -m 2 --bpipe auto
EXPECT='--sm-partition: only with --backend cuda' \
  check "profile --analytic --sm-partition 8" profile --analytic --model tiny --sm-partition 8 -o '{out}'
EXPECT='--repetitions: only with --backend cuda or cpu' \
  check "profile --analytic --repetitions 5" profile --analytic --model tiny --repetitions 5 -o '{out}'
# Option values and combinations refused with a stated message.
EXPECT="--tensor-parallel: '1,2' is neither one positive integer (GPUs per stage) nor 'auto'" \
  check "bpipe --tensor-parallel 1,2" bpipe --model tiny --stages 2 --global-batch 8 --tensor-parallel 1,2
EXPECT="--tensor-parallel: '0' is neither one positive integer (GPUs per stage) nor 'auto'" \
  check "bpipe --tensor-parallel 0" bpipe --model tiny --stages 2 --global-batch 8 --tensor-parallel 0
EXPECT='--memory: device 7 needs 87.37 GiB for parameters, gradients and optimizer state, above its limit 75.80 GiB' \
  check "plan --bpipe on: static memory over the limit" plan --model gpt3-96b --gpu a100 --stages 8 -m 32 --mbs 1 --seq 2048 --attention recompute --tensor-parallel 4 --memory 80GiB --layout 'Et*9|t*9|t*9|t*9|t*9|t*9|t*9|t*17L' --bpipe on -o '{out}'
EXPECT='--min-factor: must be at least 0' \
  check "calibrate fit --min-factor -0.5" calibrate fit --sustained --min-factor -0.5 --profile profile.json -o '{out}' run
EXPECT='--max-factor: 0.2 is below --min-factor 0.5' \
  check "calibrate fit --max-factor below --min-factor" calibrate fit --sustained --min-factor 0.5 --max-factor 0.2 --profile profile.json -o '{out}' run
EXPECT='--stages: 3 differs from 2 in sched.csv' \
  check "import --stages 3 for a 2-rank CSV" import sched.csv --model tiny --stages 3 -o '{out}'
EXPECT='uneven_stages.csv: 3 stages on 2 ranks; pipeplan needs the same number of stages per rank' \
  check "import: CSV with uneven stages per rank" import uneven_stages.csv --model tiny -o '{out}'
EXPECT='--global-batch: required by --search (or give --microbatches)' \
  check "plan --search, no --global-batch or -m" plan --model tiny --stages 2 --search -o '{out}'
EXPECT='--microbatches: must be at least 1' \
  check "plan --search -m 0" plan --model tiny --stages 2 --search -m 0 -o '{out}'
EXPECT='--search-mbs: --uniform has no cost at micro-batch sizes 2, 4' \
  check "plan --search --uniform --search-mbs 2,4" plan --search --uniform 1:1:1:0 --stages 4 --global-batch 8 --search-mbs 2,4 -o '{out}'
EXPECT='--mbs: --uniform has no cost at micro-batch size 2' \
  check "plan --uniform --mbs 2" plan --uniform 1:1:1:0 --stages 4 -m 8 --mbs 2 -o '{out}'
EXPECT='profile: give --analytic, or --backend cuda' \
  check "profile without --analytic or --backend" profile --model tiny -o '{out}'
EXPECT='--max-concat: must be at least 1' \
  check "profile --max-concat 0" profile --analytic --model tiny --max-concat 0 -o '{out}'
EXPECT="--backend: unknown backend 'tpu'" \
  check "run --backend tpu" run plan.json --backend tpu --trace '{out}'
EXPECT='--gpu: only with --backend cuda' \
  check "run --gpu without --backend cuda" run plan.json --gpu h100 --trace '{out}'
EXPECT='plan_swa.json: model '"'swa'"': sequence 32 is longer than its sliding_window 16' \
  check "run: sequence longer than the sliding window" run plan_swa.json --trace '{out}'
# calibrate eval: recorded plan commands (RUN.plan.txt) it cannot re-plan as the run was planned.
SETUP="echo '# command: pipeplan plan --frobnicate' >run.plan.txt" \
  EXPECT='run.plan.txt: the recorded command does not parse (' \
  check "calibrate eval: a recorded command that does not parse" calibrate eval --profile profile.json run
SETUP="echo '# command: pipeplan plan --model tiny --stages 2 -m 2' >run.plan.txt" \
  EXPECT='run.plan.txt: the recorded command has no --profile' \
  check "calibrate eval: a recorded command without --profile" calibrate eval --profile profile.json run
SETUP="echo '# command: pipeplan plan --profile profile.json --stages 2 --search --global-batch 8' >run.plan.txt" \
  EXPECT='run.plan.txt: a --search or --bpipe auto command is not re-planned (give --resimulate)' \
  check "calibrate eval: a recorded --search command" calibrate eval --profile profile.json run
SETUP="echo '# command: pipeplan plan --profile profile.json --stages 2 -m 2 --schedule gpipe' >run.plan.txt" \
  EXPECT='run.plan.txt: the re-planned schedule is not the one that ran' \
  check "calibrate eval: a recorded command of another schedule" calibrate eval --profile profile.json run

SETUP="echo '{\"backend\": \"cpu\", \"peak_memory_bytes\": [1, -2]}' >run.run.json" \
  EXPECT='run.run.json: peak_memory_bytes[1] must be a whole number of bytes' \
  check "calibrate eval: a CPU run report with a negative peak" calibrate eval --profile profile.json run
SETUP="echo '{\"backend\": \"cpu\"}' >run.run.json" \
  EXPECT="run.run.json: no 'peak_memory' rows (CUDA report) or 'peak_memory_bytes' (CPU)" \
  check "calibrate eval: a run report without peaks" calibrate eval --profile profile.json run
# calibrate: runs that are not the profile's, or given twice; a report for other devices.
EXPECT="run.plan.json: field 'meta.gpu' is 'h100-sxm', but profile_a100.json is for 'a100-80g'" \
  check "calibrate fit: a profile of another GPU" calibrate fit --profile profile_a100.json -o '{out}' run
EXPECT="run.plan.json: field 'meta.gpu' is 'h100-sxm', but profile_a100.json is for 'a100-80g'" \
  check "calibrate eval: a profile of another GPU" calibrate eval --profile profile_a100.json run
SETUP="sed 's/\"layers\": 4,/\"layers\": 8,/' profile.json >profile_8.json" \
  EXPECT="run.plan.json: field 'meta.model.layers' is '4', but profile_8.json is for '8'" \
  check "calibrate eval: a profile of another model shape" calibrate eval --profile profile_8.json run
EXPECT='RUN: ./run is given twice' \
  check "calibrate fit: a run given twice" calibrate fit --profile profile.json -o '{out}' run ./run
SETUP="cp run.plan.json copy.plan.json && cp run.trace.json copy.trace.json" \
  EXPECT='RUN: copy.trace.json is the trace of run again (a run counts once)' \
  check "calibrate fit: a copy of a run" calibrate fit --profile profile.json -o '{out}' run copy
SETUP="cp run.plan.json link.plan.json && ln -s run.trace.json link.trace.json" \
  EXPECT='RUN: link.trace.json is the trace of run again (a run counts once)' \
  check "calibrate fit: a link to a run's trace" calibrate fit --profile profile.json -o '{out}' run link
SETUP="echo '{\"backend\": \"cpu\", \"peak_memory_bytes\": [1, 2, 3]}' >run.run.json" \
  EXPECT='run.run.json: 3 devices'"'"' peaks for a plan of 2 devices' \
  check "calibrate eval: a run report for 3 devices" calibrate eval --profile profile.json run
# Candidate lists with a value given twice; options that exclude each other.
EXPECT="--mbs: 1 is given twice in '1,2,1'" \
  check "profile --mbs 1,2,1" profile --backend cpu --model tiny --mbs 1,2,1 -o '{out}'
EXPECT="--mbs-list: 2 is given twice in '2,2'" \
  check "bpipe --mbs-list 2,2" bpipe --model tiny --stages 2 --global-batch 8 --mbs-list 2,2
EXPECT='--top excludes --all' check "diff --top 3 --all" diff plan.json trace.json --top 3 --all
echo "bad_inputs: $((cases - failures)) of $cases cases end in one line, a non-zero exit and no file within ${limit} s"
[ "$failures" -eq 0 ]
