#include "planner/base/memory_reuse.h"

#include <cstdlib>  // defines __GLIBC__ on glibc; without a libc header the test below is false

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pipeplan {

void retain_freed_memory() {
#if defined(__GLIBC__)
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2). A refused
  // setting leaves the default in place, which is only slower, so the results are not checked.
  static_cast<void>(mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024));
  static_cast<void>(mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024));
#endif
}

}  // namespace pipeplan
