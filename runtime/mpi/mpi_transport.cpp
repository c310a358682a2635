#include "runtime/mpi/mpi_transport.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "runtime/host_tensor.h"
#include "runtime/mpi/mpi_check.h"

namespace pipeplan::mpi {

namespace {

constexpr std::int64_t kChunkBytes = std::int64_t{1} << 30;  // MPI counts are ints

int tag_of(Channel channel) {
  return channel == Channel::transfer ? kTagTransfer : kTagPipeline;
}

std::string link_name(int from, int to, Channel channel) {
  return std::string(to_string(channel)) + " link " + std::to_string(from) + "->" +
         std::to_string(to);
}

// Calls f(offset, length) for each chunk of a tensor of `bytes` bytes.
template <typename F>
void for_chunks(std::int64_t bytes, F&& f) {
  for (std::int64_t offset = 0; offset < bytes; offset += kChunkBytes)
    f(offset, static_cast<int>(std::min(kChunkBytes, bytes - offset)));
}

DType dtype_from_string(const std::string& text, const std::string& where) {
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16, DType::i32}) {
    if (to_string(dtype) == text) return dtype;
  }
  throw Error(where + ": the header names an unknown dtype '" + text + "'");
}

std::string encode_header(const Message& message) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& [name, tensor] : message.tensors)
    tensors.push_back({name, std::string(to_string(tensor.dtype())), tensor.shape()});
  return nlohmann::json{{"tag", message.tag}, {"bytes", message.bytes}, {"tensors", tensors}}
      .dump();
}

// The message the header describes, with zeroed host tensors to receive into.
Message decode_header(const std::string& header, const std::string& where) {
  Message message;
  try {
    const nlohmann::json j = nlohmann::json::parse(header);
    message.tag = j.at("tag").get<std::string>();
    message.bytes = j.at("bytes").get<std::int64_t>();
    for (const nlohmann::json& entry : j.at("tensors")) {
      const Shape shape = entry.at(2).get<Shape>();
      message.tensors.emplace_back(
          entry.at(0).get<std::string>(),
          host_zeros(shape, dtype_from_string(entry.at(1).get<std::string>(), where)));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": received a corrupted header (" + e.what() + ")");
  }
  return message;
}

// Cancels the requests still open and waits for them (a cancelled receive completes locally).
void cancel_open(std::vector<MPI_Request>& requests) {
  for (MPI_Request& request : requests) {
    if (request == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
}

std::string status_errors(int code, const std::vector<MPI_Status>& statuses) {
  std::string text = error_string(code);
  if (code != MPI_ERR_IN_STATUS) return text;
  for (const MPI_Status& status : statuses) {
    if (status.MPI_ERROR != MPI_SUCCESS && status.MPI_ERROR != MPI_ERR_PENDING)
      return error_string(status.MPI_ERROR);
  }
  return text;
}

}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm, std::chrono::milliseconds send_timeout)
    : comm_(comm), send_timeout_(send_timeout) {
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiTransport::~MpiTransport() {
  // MpiSession::finish drains before the transport goes; should sends still be open (the job
  // is being aborted), MPI may yet read their buffers: keep them for the rest of the process.
  if (pending_.empty()) return;
  static auto* kept = new std::list<PendingSend>();  // NOLINT: intentionally never freed
  kept->splice(kept->end(), pending_);
}

void MpiTransport::reap_locked() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    int done = 0;
    MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &done,
                MPI_STATUSES_IGNORE);
    it = done != 0 ? pending_.erase(it) : std::next(it);
  }
}

void MpiTransport::send(int from, int to, Channel channel, Message message) {
  if (from != rank_) {
    throw Error("MPI transport: rank " + std::to_string(rank_) + " cannot send for device " +
                std::to_string(from) + " (rank r runs plan device r)");
  }
  if (to < 0 || to >= size_ || to == rank_) {
    throw Error("MPI transport: no " + link_name(from, to, channel) + " in a world of " +
                std::to_string(size_) + " ranks");
  }
  for (const auto& [name, tensor] : message.tensors) {
    if (!tensor.defined() || tensor.device() != Device::cpu) {
      throw Error("MPI transport: tensor '" + name + "' of message '" + message.tag +
                  "' is not a host tensor");
    }
  }
  PendingSend pending;
  pending.header = encode_header(message);
  if (pending.header.size() > static_cast<std::size_t>(kHeaderBytes)) {
    throw Error("MPI transport: message '" + message.tag + "' needs a header of " +
                std::to_string(pending.header.size()) + " bytes, above the " +
                std::to_string(kHeaderBytes) + " a receiver posts");
  }
  pending.message = std::move(message);
  pending.to = to;
  pending.channel = channel;
  const std::lock_guard lock(mutex_);
  reap_locked();
  PendingSend& posted = pending_.emplace_back(std::move(pending));
  const int tag = tag_of(channel);
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Isend(posted.header.data(), static_cast<int>(posted.header.size()), MPI_BYTE, to, tag,
                  comm_, &request),
        "MPI_Isend");
  posted.requests.push_back(request);
  for (const auto& entry : posted.message.tensors) {
    auto* data = static_cast<char*>(entry.second.data());
    for_chunks(entry.second.bytes(), [&](std::int64_t offset, int length) {
      check(MPI_Isend(data + offset, length, MPI_BYTE, to, tag, comm_, &request), "MPI_Isend");
      posted.requests.push_back(request);
    });
  }
}

void MpiTransport::flush(int from, int to, Channel channel, std::chrono::milliseconds timeout) {
  if (from != rank_) {
    throw Error("MPI transport: rank " + std::to_string(rank_) + " cannot flush for device " +
                std::to_string(from) + " (rank r runs plan device r)");
  }
  const std::string what = "the sends on the " + link_name(from, to, channel);
  const Clock::time_point deadline = Clock::now() + timeout;
  Backoff backoff;
  for (;;) {
    {
      const std::lock_guard lock(mutex_);
      reap_locked();
      if (std::none_of(pending_.begin(), pending_.end(), [&](const PendingSend& pending) {
            return pending.to == to && pending.channel == channel;
          })) {
        return;
      }
    }
    if (cancelled_) throw Cancelled("cancelled while waiting for " + what);
    if (const std::optional<std::string> failure = peer_failure()) {
      throw Cancelled(*failure + "; stopped waiting for " + what);
    }
    if (Clock::now() > deadline) {
      throw Error("timed out after " + std::to_string(timeout.count()) + " ms waiting for " + what);
    }
    backoff.pause();
  }
}

std::optional<std::string> MpiTransport::peer_failure() {
  {
    const std::lock_guard lock(peer_mutex_);
    if (peer_failure_) return peer_failure_;
  }
  int flag = 0;
  MPI_Message notice = MPI_MESSAGE_NULL;
  MPI_Status status;
  if (MPI_Improbe(MPI_ANY_SOURCE, kTagNotice, comm_, &flag, &notice, &status) != MPI_SUCCESS ||
      flag == 0) {
    return std::nullopt;
  }
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::string text(static_cast<std::size_t>(std::max(count, 1)), '\0');
  MPI_Mrecv(text.data(), count, MPI_BYTE, &notice, MPI_STATUS_IGNORE);
  const std::lock_guard lock(peer_mutex_);
  if (!peer_failure_) peer_failure_ = "rank " + std::to_string(status.MPI_SOURCE) + " failed";
  return peer_failure_;
}

void MpiTransport::wait(std::vector<MPI_Request>& requests, std::vector<MPI_Status>& statuses,
                        Clock::time_point deadline, std::chrono::milliseconds timeout,
                        const std::string& what) {
  statuses.resize(requests.size());
  Backoff backoff;
  for (int polls = 0;; ++polls) {
    int done = 0;
    const int code =
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, statuses.data());
    if (code != MPI_SUCCESS) {
      cancel_open(requests);
      throw Error("MPI transport: receiving " + what + " failed: " + status_errors(code, statuses));
    }
    if (done != 0) return;
    if (cancelled_) {
      cancel_open(requests);
      throw Cancelled("cancelled while waiting for " + what);
    }
    if (polls % 8 == 0) {
      if (const std::optional<std::string> failure = peer_failure()) {
        cancel_open(requests);
        throw Cancelled(*failure + "; stopped waiting for " + what);
      }
    }
    if (Clock::now() > deadline) {
      cancel_open(requests);
      throw Error("timed out after " + std::to_string(timeout.count()) + " ms waiting for " + what);
    }
    backoff.pause();
  }
}

Message MpiTransport::recv(int to, int from, Channel channel, std::string_view expected_tag,
                           std::chrono::milliseconds timeout) {
  if (to != rank_ || from < 0 || from >= size_ || from == rank_) {
    throw Error("MPI transport: rank " + std::to_string(rank_) + " has no " +
                link_name(from, to, channel) + " to receive on");
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::string what =
      "'" + std::string(expected_tag) + "' on the " + link_name(from, to, channel);
  const int tag = tag_of(channel);
  std::string header(static_cast<std::size_t>(kHeaderBytes), '\0');
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  std::vector<MPI_Status> statuses;
  check(MPI_Irecv(header.data(), kHeaderBytes, MPI_BYTE, from, tag, comm_, requests.data()),
        "MPI_Irecv");
  wait(requests, statuses, deadline, timeout, what);
  int count = 0;
  MPI_Get_count(statuses.data(), MPI_BYTE, &count);
  header.resize(static_cast<std::size_t>(std::max(count, 0)));
  Message message = decode_header(header, "MPI transport: " + what);

  requests.clear();
  std::vector<int> lengths;
  for (const auto& entry : message.tensors) {
    auto* data = static_cast<char*>(entry.second.data());
    for_chunks(entry.second.bytes(), [&](std::int64_t offset, int length) {
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Irecv(data + offset, length, MPI_BYTE, from, tag, comm_, &request), "MPI_Irecv");
      requests.push_back(request);
      lengths.push_back(length);
    });
  }
  if (requests.empty()) return message;
  wait(requests, statuses, deadline, timeout, what);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    MPI_Get_count(&statuses[i], MPI_BYTE, &count);
    if (count != lengths[i]) {
      throw Error("MPI transport: " + what + ": received " + std::to_string(count) +
                  " bytes of a tensor chunk where the header promises " +
                  std::to_string(lengths[i]) + " (corrupted)");
    }
  }
  return message;
}

void MpiTransport::cancel() {
  cancelled_ = true;
  // Called from a failing stream thread: nothing may escape.
  const std::lock_guard lock(mutex_);
  if (notified_) return;
  notified_ = true;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    PendingSend& notice = pending_.emplace_back();
    notice.header = "failed";
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(notice.header.data(), static_cast<int>(notice.header.size()), MPI_BYTE, r,
                  kTagNotice, comm_, &request) == MPI_SUCCESS) {
      notice.requests.push_back(request);
    }
  }
}

void MpiTransport::reset() {
  if (cancelled_ || peer_failure()) {
    throw Error("MPI transport: a rank failed in an earlier step; the ranks cannot go on together");
  }
  const Clock::time_point deadline = Clock::now() + send_timeout_;
  Backoff backoff;
  for (;;) {
    {
      const std::lock_guard lock(mutex_);
      reap_locked();
      if (pending_.empty()) return;
    }
    if (Clock::now() > deadline) {
      throw Error(
          "MPI transport: the peers did not receive every message of the last step within " +
          std::to_string(send_timeout_.count()) + " ms");
    }
    backoff.pause();
  }
}

bool MpiTransport::drain() {
  for (;;) {
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, &message, &status) != MPI_SUCCESS ||
        flag == 0) {
      break;
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::vector<char> dropped(static_cast<std::size_t>(std::max(count, 1)));
    MPI_Mrecv(dropped.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
  }
  const std::lock_guard lock(mutex_);
  reap_locked();
  return pending_.empty();
}

}  // namespace pipeplan::mpi
