#!/usr/bin/env bash
# python3 for PyTorch, started with the library path bench/gpu/run.sh was started with
# ($PIPEPLAN_TORCH_LD_LIBRARY_PATH; none where it is empty) rather than the one run.sh sets for
# pipeplan's binaries (a staged copy's CUDA libraries, the chosen NCCL), so that torch loads its
# own libraries. run.sh names it as PIPEPLAN_TORCH_PYTHON for the tests that start pipeplan and
# torch alike (tests/schedules/torch_dualpipe_v_test.py).
#
# Usage: PIPEPLAN_TORCH_LD_LIBRARY_PATH=PATH bench/gpu/torch_python.sh ARG...   (python3's)
if [[ -n ${PIPEPLAN_TORCH_LD_LIBRARY_PATH:-} ]]; then
  export LD_LIBRARY_PATH=$PIPEPLAN_TORCH_LD_LIBRARY_PATH
else
  unset LD_LIBRARY_PATH
fi
unset PIPEPLAN_TORCH_LD_LIBRARY_PATH
exec python3 "$@"
