// A model file as `--model path.json` reads it: a Hugging Face config.json, or pipeplan's own
// model JSON when it has "family"; then the analytic profile of what it loaded.
#include "planner/base/io.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "profiles/model.h"
#include "tests/fuzz/fuzz_support.h"

#include <nlohmann/json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipeplan;
  static const GpuSpec gpu = find_gpu("h100");
  return fuzz::run([&] {
    const nlohmann::json j = parse_json_text(fuzz::text_of(data, size), "config.json");
    const ModelConfig model = j.is_object() && j.contains("family")
                                  ? model_from_json(j, "config.json")
                                  : hf_config_from_json(j, "config.json", "fuzz");
    if (model.family == "uniform") return;
    static_cast<void>(model.parameter_count());
    static_cast<void>(model.flops_per_token(model.seq));
    AnalyticOptions options;
    options.micro_batch_sizes = {1, 2};
    static_cast<void>(analytic_profile(model, gpu, options));
  });
}
