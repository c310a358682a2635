// Small statistics shared by the profiler, the benchmarks and the run report.
#pragma once

#include <optional>
#include <utility>
#include <vector>

namespace pipeplan {

// The median of `samples` (the mean of the middle two for an even count). Throws Error when
// there are none.
double median(std::vector<double> samples);

// The x minimising sum over rows of (row . x - target)^2 (each row its coefficients and target,
// all rows as long; a few unknowns at most): the normal equations, nudged by 1e-12 of their
// largest diagonal entry, by Gaussian elimination with partial pivoting. nullopt without rows,
// where the columns are (nearly) dependent (a pivot under 1e-14 of that entry), or where the
// answer is not finite.
std::optional<std::vector<double>> least_squares(
    const std::vector<std::pair<std::vector<double>, double>>& rows);

// The x minimising sum over rows of |row . x - target| (least absolute deviations: a few rows far
// off, an op held up by something else, do not pull it as they pull least squares): iteratively
// reweighted least squares from least_squares' answer, each row weighted by 1 / max(|residual|,
// 1e-6 of the mean |target|), until no unknown moves by more than 1e-9 relative (at most 100
// rounds). nullopt where least_squares gives none.
std::optional<std::vector<double>> least_absolute(
    const std::vector<std::pair<std::vector<double>, double>>& rows);

}  // namespace pipeplan
