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

// The point rank 0 names when it reaches the end of the run (ProcessGroup::end_run); no
// collective's `what` starts with a control character.
constexpr std::string_view kRankZeroAtEnd = "\x01rank 0 at the end of the run";

// The first byte of an answer from rank 0: the payload follows, or the error every rank throws.
constexpr char kAnswerOk = '1';
constexpr char kAnswerFailed = '0';

// "left the run before <what> (...)", of `ranks` ranks.
std::string left_text(std::string_view what, std::size_t ranks = 1) {
  return "left the run before " + std::string(what) +
         (ranks == 1 ? " (its own error is on its output)"
                     : " (their own errors are on their outputs)");
}

// "rank 2 left the run before <what> (...)", "ranks 1, 3 left ...".
std::string ranks_left(const std::vector<int>& left, std::string_view what) {
  return rank_list(left) + " " + left_text(what, left.size());
}

// Every rank's part, by rank, once all arrived (require_arrived, no rank left).
std::vector<std::string> arrived_parts(std::vector<std::optional<std::string>>& parts) {
  std::vector<std::string> out;
  out.reserve(parts.size());
  for (std::optional<std::string>& part : parts)
    out.push_back(std::move(*part));
  return out;
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

void ProcessGroup::send(int to, std::string_view what, std::string_view bytes) {
  post(to, pack({std::string(what), std::string(bytes)}));
}

ProcessGroup::Received ProcessGroup::receive(int from, std::string_view what,
                                             Clock::time_point deadline, const Idle& idle) {
  if (held_.empty()) held_.resize(static_cast<std::size_t>(size()));
  auto& held = held_.at(static_cast<std::size_t>(from));
  for (auto it = held.begin(); it != held.end(); ++it) {
    if (it->first == what) {
      Received got{std::move(it->second), false};
      held.erase(it);
      return got;
    }
  }
  // A rank at the end of the run takes part in nothing before it.
  if (what != kEndOfRun && !held.empty()) return {std::nullopt, true};
  for (;;) {
    std::optional<std::string> raw = poll(from, deadline, idle);
    if (!raw) return {};
    std::vector<std::string> parts =
        unpack(*raw, "process group: a message from rank " + std::to_string(from));
    if (parts.size() != 2) {
      throw Error("process group: a malformed message from rank " + std::to_string(from) + " (" +
                  std::to_string(parts.size()) + " parts)");
    }
    if (parts[0] == what) return {std::move(parts[1]), false};
    if (parts[0] == kEndOfRun || parts[0] == kRankZeroAtEnd) {
      if (what == kEndOfRun) continue;  // rank 0's notice, for the ranks still elsewhere
      held.emplace_back(std::move(parts[0]), std::move(parts[1]));
      return {std::nullopt, true};
    }
    // A message of a point this rank has passed without the sender (it had left the run before
    // it, or this rank did): nobody reads it.
  }
}

std::string ProcessGroup::from_rank_zero(std::string_view what, Clock::time_point deadline,
                                         const std::string& silence, const Idle& idle) {
  Received got = receive(0, what, deadline, idle);
  if (got.left) {
    throw AgreedError("rank 0 " + left_text(what));  // rank 0 printed its own error
  }
  if (!got.bytes) {
    mark_broken();
    throw RankZeroSilent(silence);
  }
  std::string& body = *got.bytes;
  if (body.empty() || (body[0] != kAnswerOk && body[0] != kAnswerFailed)) {
    throw Error("process group: a malformed answer from rank 0 at " + std::string(what));
  }
  if (body[0] == kAnswerFailed) throw AgreedError(body.substr(1));
  return body.substr(1);
}

void ProcessGroup::fail_everywhere(const std::string& text, std::string_view what) {
  for (int r = 1; r < size(); ++r)
    send(r, what, kAnswerFailed + text);
  throw AgreedError(text);
}

void ProcessGroup::require_arrived(const Gathered& gathered, std::string_view what,
                                   std::chrono::milliseconds timeout) {
  if (gathered.missing.empty()) return;
  mark_broken();
  throw GroupTimeout(rank_list(gathered.missing) + " did not reach " + std::string(what) + " " +
                     within(timeout) + " (dead, hung or far behind)");
}

ProcessGroup::Gathered ProcessGroup::gather_available(std::string bytes, std::string_view what,
                                                      std::chrono::milliseconds timeout,
                                                      const Idle& idle) {
  Gathered gathered;
  if (rank() != 0) {
    send(0, what, bytes);
    return gathered;
  }
  gathered.parts.resize(static_cast<std::size_t>(size()));
  gathered.parts[0] = std::move(bytes);
  const Clock::time_point deadline = Clock::now() + timeout;
  // In rank order against one deadline: once it has passed, the rest are only checked.
  for (int r = 1; r < size(); ++r) {
    Received got = receive(r, what, deadline, idle);
    if (got.left) {
      gathered.left.push_back(r);
    } else if (!got.bytes) {
      gathered.missing.push_back(r);
    }
    gathered.parts[static_cast<std::size_t>(r)] = std::move(got.bytes);
  }
  return gathered;
}

std::vector<std::string> ProcessGroup::gather(std::string bytes, std::string_view what,
                                              std::chrono::milliseconds timeout, const Idle& idle) {
  Gathered gathered = gather_available(std::move(bytes), what, timeout, idle);
  if (rank() != 0) return {};
  require_arrived(gathered, what, timeout);
  if (!gathered.left.empty()) throw AgreedError(ranks_left(gathered.left, what));
  return arrived_parts(gathered.parts);
}

std::string ProcessGroup::broadcast(std::string bytes, std::string_view what,
                                    std::chrono::milliseconds timeout, const Idle& idle) {
  if (rank() == 0) {
    for (int r = 1; r < size(); ++r)
      send(r, what, kAnswerOk + bytes);
    return bytes;
  }
  return from_rank_zero(what, Clock::now() + timeout,
                        "rank 0 did not send " + std::string(what) + " " + within(timeout) +
                            " (dead, hung or far behind)",
                        idle);
}

std::string ProcessGroup::answer(std::string bytes, std::string_view what,
                                 std::chrono::milliseconds timeout, const Idle& idle) {
  if (rank() == 0) return broadcast(std::move(bytes), what, timeout, idle);
  // The wait is not the user's timeout (rank 0 first waits that long for the others): say how
  // it follows from it.
  return from_rank_zero(what, Clock::now() + answer_timeout(timeout),
                        "rank 0 did not answer at " + std::string(what) + " within " +
                            answer_timeout_text(timeout, "dead, hung or far behind"),
                        idle);
}

void ProcessGroup::reply(int to, std::string_view bytes, std::string_view what) {
  send(to, what, std::string(1, kAnswerOk).append(bytes));
}

std::vector<std::string> ProcessGroup::all_gather(std::string bytes, std::string_view what,
                                                  std::chrono::milliseconds timeout,
                                                  const Idle& idle) {
  std::string packed;
  if (rank() == 0) {
    Gathered gathered = gather_available(std::move(bytes), what, timeout, idle);
    require_arrived(gathered, what, timeout);
    if (!gathered.left.empty()) fail_everywhere(ranks_left(gathered.left, what), what);
    packed = pack(arrived_parts(gathered.parts));
  } else {
    send(0, what, bytes);
  }
  std::vector<std::string> all = unpack(answer(std::move(packed), what, timeout, idle), what);
  if (static_cast<int>(all.size()) != size()) {
    throw Error(std::string(what) + ": " + std::to_string(all.size()) + " parts for " +
                std::to_string(size()) + " ranks");
  }
  return all;
}

void ProcessGroup::barrier(std::string_view what, std::chrono::milliseconds timeout,
                           const Idle& idle) {
  all_gather(std::string(), what, timeout, idle);
}

void ProcessGroup::end_run(std::chrono::milliseconds timeout, const Idle& idle) {
  if (rank() == 0) {
    for (int r = 1; r < size(); ++r)
      send(r, kRankZeroAtEnd, {});
  }
  barrier(kEndOfRun, timeout, idle);
}

void ProcessGroup::agree(const std::optional<std::string>& local_error, std::string_view what,
                         std::chrono::milliseconds timeout) {
  // "1" + nothing: ok; "0" + message: failed.
  std::string mine = local_error ? "0" + *local_error : std::string("1");
  if (rank() != 0) {
    send(0, what, mine);
    answer({}, what, timeout);  // throws the agreed error, if any
    return;
  }
  const Gathered gathered = gather_available(std::move(mine), what, timeout);
  require_arrived(gathered, what, timeout);
  // A rank that left is at its end-of-run barrier, on an error of its own printed on its output.
  auto message = [&](int r) {
    const std::optional<std::string>& part = gathered.parts[static_cast<std::size_t>(r)];
    return part ? part->substr(1) : left_text(what);
  };
  std::vector<int> failed;
  for (int r = 0; r < size(); ++r) {
    const std::optional<std::string>& part = gathered.parts[static_cast<std::size_t>(r)];
    if (!part || part->empty() || (*part)[0] != '1') failed.push_back(r);
  }
  if (failed.empty()) {
    answer({}, what, timeout);
    return;
  }
  bool alike = static_cast<int>(failed.size()) == size();
  for (const int r : failed)
    alike = alike && message(r) == message(failed.front());
  std::string text = "rank " + std::to_string(failed.front()) + ": " + message(failed.front());
  if (alike) text = message(failed.front());
  if (!alike && failed.size() > 1) {
    const std::vector<int> others(failed.begin() + 1, failed.end());
    text += " (" + rank_list(others) + " failed too)";
  }
  fail_everywhere(text, what);
}

}  // namespace pipeplan
