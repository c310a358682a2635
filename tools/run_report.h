// The report of `pipeplan run` on a GPU: the measured step beside the plan's prediction
// (runtime/measured.h's RunComparison), as text and as JSON. An emulated run says so on its
// first line and in its JSON ("emulated on one GPU: HBM and L2 shared").
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/measured.h"

namespace pipeplan {

std::string format_run_report(const RunComparison& run, const MeasuredHardware& hw);
nlohmann::json run_report_json(const RunComparison& run, const MeasuredHardware& hw);
// "emulated on one GPU: HBM and L2 shared (4 stages x 32 of 132 SMs)", or "" when not emulated.
std::string emulation_line(const MeasuredHardware& hw);

}  // namespace pipeplan
