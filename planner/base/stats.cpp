#include "planner/base/stats.h"

#include <algorithm>
#include <cmath>

#include "planner/base/error.h"

namespace pipeplan {

double median(std::vector<double> samples) {
  if (samples.empty()) throw Error("median of no samples");
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

std::optional<std::vector<double>> least_squares(
    const std::vector<std::pair<std::vector<double>, double>>& rows) {
  if (rows.empty()) return std::nullopt;
  const std::size_t m = rows.front().first.size();
  // [A | b], A = C^T C, b = C^T target.
  std::vector<std::vector<double>> a(m, std::vector<double>(m + 1, 0.0));
  for (const auto& [row, target] : rows) {
    for (std::size_t j = 0; j < m; ++j) {
      a[j][m] += row[j] * target;
      for (std::size_t k = 0; k < m; ++k)
        a[j][k] += row[j] * row[k];
    }
  }
  double largest = 0;
  for (std::size_t j = 0; j < m; ++j)
    largest = std::max(largest, a[j][j]);
  if (!(largest > 0)) return std::nullopt;
  for (std::size_t j = 0; j < m; ++j)
    a[j][j] += 1e-12 * largest;
  for (std::size_t j = 0; j < m; ++j) {
    std::size_t pivot = j;
    for (std::size_t r = j + 1; r < m; ++r) {
      if (std::abs(a[r][j]) > std::abs(a[pivot][j])) pivot = r;
    }
    if (!(std::abs(a[pivot][j]) > 1e-14 * largest)) return std::nullopt;
    std::swap(a[j], a[pivot]);
    for (std::size_t r = j + 1; r < m; ++r) {
      const double f = a[r][j] / a[j][j];
      for (std::size_t k = j; k <= m; ++k)
        a[r][k] -= f * a[j][k];
    }
  }
  std::vector<double> x(m, 0.0);
  for (std::size_t j = m; j-- > 0;) {
    double sum = a[j][m];
    for (std::size_t k = j + 1; k < m; ++k)
      sum -= a[j][k] * x[k];
    x[j] = sum / a[j][j];
    if (!std::isfinite(x[j])) return std::nullopt;
  }
  return x;
}

std::optional<std::vector<double>> least_absolute(
    const std::vector<std::pair<std::vector<double>, double>>& rows) {
  std::optional<std::vector<double>> x = least_squares(rows);
  if (!x) return x;
  double scale = 0;
  for (const auto& [row, target] : rows)
    scale += std::abs(target);
  const double floor = 1e-6 * std::max(scale / static_cast<double>(rows.size()), 1e-300);
  std::vector<std::pair<std::vector<double>, double>> weighted = rows;
  constexpr int kRounds = 100;
  for (int round = 0; round < kRounds; ++round) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& [row, target] = rows[i];
      double fitted = 0;
      for (std::size_t j = 0; j < row.size(); ++j)
        fitted += row[j] * (*x)[j];
      // Squares weighted by 1 / |r| sum to sum |r|: the rows scaled by its square root.
      const double w = 1 / std::sqrt(std::max(std::abs(fitted - target), floor));
      for (std::size_t j = 0; j < row.size(); ++j)
        weighted[i].first[j] = row[j] * w;
      weighted[i].second = target * w;
    }
    const std::optional<std::vector<double>> next = least_squares(weighted);
    if (!next) return x;
    double moved = 0;
    for (std::size_t j = 0; j < next->size(); ++j)
      moved = std::max(moved, std::abs((*next)[j] - (*x)[j]) / std::max(std::abs((*x)[j]), 1e-300));
    x = next;
    if (moved <= 1e-9) break;
  }
  return x;
}

}  // namespace pipeplan
