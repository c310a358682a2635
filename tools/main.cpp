#include "tools/cli.h"

int main(int argc, char** argv) {
  return pipeplan::run_cli(argc, argv);
}
