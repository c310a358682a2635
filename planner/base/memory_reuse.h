// Process-wide allocator setting for planning many task graphs in one process (plan --search,
// compare, auto's candidates, benchmarks). A 48k-node plan allocates ~20 MB of node, edge and
// simulation arrays and frees them again; glibc's defaults hand such blocks back to the kernel
// (mmap above 128 KiB, heap trimming), so every plan pays its page faults afresh: 8 ms of a
// 25 ms lower + validate + simulate at P = 32, m = 256 (bench/bench_planner.cpp). Keeping freed
// memory in the process, as jemalloc and tcmalloc do by default, removes that.
#pragma once

namespace pipeplan {

// glibc: blocks up to 32 MiB from the heap instead of mmap, and no trimming below 1 GiB of free
// heap. Elsewhere a no-op. Call once, early in main.
void retain_freed_memory();

}  // namespace pipeplan
