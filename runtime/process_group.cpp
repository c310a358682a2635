#include "runtime/process_group.h"

#include <cstddef>
#include <cstdint>

namespace pipeplan {

namespace {

constexpr std::size_t kLengthBytes = 8;

// Length-prefixed strings in one buffer (all_gather's broadcast), each length 8 bytes
// little-endian, as the TCP frames are: hosts of either byte order read it alike.
std::string pack(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) {
    const auto length = static_cast<std::uint64_t>(part.size());
    for (std::size_t i = 0; i < kLengthBytes; ++i)
      out += static_cast<char>((length >> (8 * i)) & 0xFFU);
    out += part;
  }
  return out;
}

std::vector<std::string> unpack(std::string_view bytes, std::string_view what) {
  std::vector<std::string> parts;
  while (!bytes.empty()) {
    if (bytes.size() < kLengthBytes) throw Error(std::string(what) + ": truncated message");
    std::uint64_t length = 0;
    for (std::size_t i = 0; i < kLengthBytes; ++i)
      length |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
    bytes.remove_prefix(kLengthBytes);
    if (length > bytes.size()) throw Error(std::string(what) + ": truncated message");
    parts.emplace_back(bytes.substr(0, length));
    bytes.remove_prefix(length);
  }
  return parts;
}

std::string within(std::chrono::milliseconds timeout) {
  return "within " + std::to_string(timeout.count()) + " ms";
}

}  // namespace

std::string answer_timeout_text(std::chrono::milliseconds timeout, std::string_view why) {
  return std::to_string(answer_timeout(timeout).count()) + " ms (2 x --timeout-ms " +
         std::to_string(timeout.count()) + " + 1 s; " + std::string(why) + ")";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i)
    text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return text;
}

std::uint64_t fingerprint(std::string_view bytes, std::uint64_t seed) {
  std::uint64_t hash = seed;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

std::vector<std::optional<std::string>> ProcessGroup::gather_available(
    std::string bytes, std::string_view /*what*/, std::chrono::milliseconds timeout,
    const Idle& idle) {
  if (rank() != 0) {
    post(0, std::move(bytes));
    return {};
  }
  std::vector<std::optional<std::string>> parts(static_cast<std::size_t>(size()));
  parts[0] = std::move(bytes);
  const Clock::time_point deadline = Clock::now() + timeout;
  // In rank order against one deadline: once it has passed, the rest are only checked.
  for (int r = 1; r < size(); ++r)
    parts[static_cast<std::size_t>(r)] = poll(r, deadline, idle);
  return parts;
}

std::vector<std::string> ProcessGroup::gather(std::string bytes, std::string_view what,
                                              std::chrono::milliseconds timeout, const Idle& idle) {
  std::vector<std::optional<std::string>> parts =
      gather_available(std::move(bytes), what, timeout, idle);
  std::vector<std::string> out;
  std::vector<int> missing;
  for (std::size_t r = 0; r < parts.size(); ++r) {
    if (!parts[r]) {
      missing.push_back(static_cast<int>(r));
    } else {
      out.push_back(std::move(*parts[r]));
    }
  }
  if (!missing.empty()) {
    mark_broken();
    throw GroupTimeout(rank_list(missing) + " did not reach " + std::string(what) + " " +
                       within(timeout) + " (dead, hung or far behind)");
  }
  return out;
}

std::string ProcessGroup::broadcast(std::string bytes, std::string_view what,
                                    std::chrono::milliseconds timeout, const Idle& idle) {
  if (rank() == 0) {
    for (int r = 1; r < size(); ++r)
      post(r, bytes);
    return bytes;
  }
  std::optional<std::string> got = poll(0, Clock::now() + timeout, idle);
  if (!got) {
    mark_broken();
    throw GroupTimeout("rank 0 did not send " + std::string(what) + " " + within(timeout) +
                       " (dead, hung or far behind)");
  }
  return std::move(*got);
}

std::string ProcessGroup::answer(std::string bytes, std::string_view what,
                                 std::chrono::milliseconds timeout, const Idle& idle) {
  if (rank() == 0) return broadcast(std::move(bytes), what, timeout, idle);
  std::optional<std::string> got = poll(0, Clock::now() + answer_timeout(timeout), idle);
  if (!got) {
    mark_broken();
    // The wait is not the user's timeout (rank 0 first waits that long for the others): say
    // how it follows from it.
    throw GroupTimeout("rank 0 did not answer at " + std::string(what) + " within " +
                       answer_timeout_text(timeout, "dead, hung or far behind"));
  }
  return std::move(*got);
}

std::vector<std::string> ProcessGroup::all_gather(std::string bytes, std::string_view what,
                                                  std::chrono::milliseconds timeout,
                                                  const Idle& idle) {
  const std::vector<std::string> parts = gather(std::move(bytes), what, timeout, idle);
  std::vector<std::string> all =
      unpack(answer(rank() == 0 ? pack(parts) : std::string(), what, timeout, idle), what);
  if (static_cast<int>(all.size()) != size()) {
    throw Error(std::string(what) + ": " + std::to_string(all.size()) + " parts for " +
                std::to_string(size()) + " ranks");
  }
  return all;
}

void ProcessGroup::barrier(std::string_view what, std::chrono::milliseconds timeout,
                           const Idle& idle) {
  gather(std::string(), what, timeout, idle);
  answer(std::string(), what, timeout, idle);
}

void ProcessGroup::agree(const std::optional<std::string>& local_error, std::string_view what,
                         std::chrono::milliseconds timeout) {
  // "1" + nothing: ok; "0" + message: failed.
  const std::vector<std::string> all =
      all_gather(local_error ? "0" + *local_error : std::string("1"), what, timeout);
  std::vector<int> failed;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty() || all[r][0] != '1') failed.push_back(static_cast<int>(r));
  }
  if (failed.empty()) return;
  // An empty part is no answer to this agreement: a rank that left the run on an error of its
  // own (printed on its output) reached its end-of-run barrier instead.
  auto message = [&](int r) {
    const std::string& part = all[static_cast<std::size_t>(r)];
    return part.empty() ? std::string("left the run before ") + std::string(what) +
                              " (its own error is on its output)"
                        : part.substr(1);
  };
  bool alike = static_cast<int>(failed.size()) == size();
  for (const int r : failed)
    alike = alike && message(r) == message(failed.front());
  if (alike) throw AgreedError(message(failed.front()));
  std::string text = "rank " + std::to_string(failed.front()) + ": " + message(failed.front());
  if (failed.size() > 1) {
    const std::vector<int> others(failed.begin() + 1, failed.end());
    text += " (" + rank_list(others) + " failed too)";
  }
  throw AgreedError(text);
}

}  // namespace pipeplan
