// gpus.json (profiles/gpus.json, or the one in PIPEPLAN_DATA_DIR): the GPU table every plan reads.
#include "planner/base/io.h"
#include "profiles/gpu.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipeplan;
  return fuzz::run([&] {
    static_cast<void>(
        gpus_from_json(parse_json_text(fuzz::text_of(data, size), "gpus.json"), "gpus.json"));
  });
}
