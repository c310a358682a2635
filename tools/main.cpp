#include "planner/base/memory_reuse.h"
#include "tools/cli.h"

int main(int argc, char** argv) {
  pipeplan::retain_freed_memory();  // search and compare build hundreds of task graphs
  return pipeplan::run_cli(argc, argv);
}
