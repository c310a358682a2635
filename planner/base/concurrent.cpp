#include "planner/base/concurrent.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace pipeplan {

namespace {

// Work that the helper thread or the caller runs, whichever claims it first.
class SharedTask {
 public:
  explicit SharedTask(std::function<void()> work) : work_(std::move(work)) {}
  // Runs the work unless it is claimed already; true when this call ran it. An exception it
  // throws is kept for the caller (wait()).
  bool try_run() {
    if (claimed_.exchange(true)) return false;
    try {
      work_();
    } catch (...) {
      error_ = std::current_exception();
    }
    {
      const std::lock_guard<std::mutex> guard(lock_);
      finished_ = true;
    }
    done_.notify_all();
    return true;
  }
  // Until the claimant has finished; rethrows what the work threw.
  void wait() {
    std::unique_lock<std::mutex> guard(lock_);
    done_.wait(guard, [this] { return finished_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::function<void()> work_;
  std::atomic<bool> claimed_{false};
  std::mutex lock_;
  std::condition_variable done_;
  bool finished_ = false;
  std::exception_ptr error_;
};

// One thread for the process, started on first use, that runs offered tasks when the scheduler
// gives it a core. A caller whose task is still unclaimed when it gets to it runs the task
// itself: on a busy machine a helper that is woken late then costs nothing, where a thread per
// call (std::async) made the caller wait for it to be scheduled, and every call paid its start.
class Helper {
 public:
  static Helper& instance() {
    static Helper helper;
    return helper;
  }
  Helper(const Helper&) = delete;
  Helper& operator=(const Helper&) = delete;
  ~Helper() {
    {
      const std::lock_guard<std::mutex> guard(lock_);
      stop_ = true;
    }
    wake_.notify_one();
    worker_.join();
  }
  void offer(std::shared_ptr<SharedTask> task) {
    {
      const std::lock_guard<std::mutex> guard(lock_);
      queue_.push_back(std::move(task));
    }
    wake_.notify_one();
  }

 private:
  Helper() : worker_([this] { serve(); }) {}
  void serve() {
    for (;;) {
      std::shared_ptr<SharedTask> task;
      {
        std::unique_lock<std::mutex> guard(lock_);
        wake_.wait(guard, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task->try_run();  // a task its caller claimed first is dropped
    }
  }

  std::mutex lock_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<SharedTask>> queue_;
  bool stop_ = false;
  std::thread worker_;  // last: it starts once the rest is ready
};

}  // namespace

void run_beside(const std::function<void()>& offered, const std::function<void()>& here) {
  const auto task = std::make_shared<SharedTask>(offered);
  Helper::instance().offer(task);
  std::exception_ptr error;
  try {
    here();
  } catch (...) {
    error = std::current_exception();
  }
  task->try_run();
  task->wait();  // rethrows what `offered` threw
  if (error) std::rethrow_exception(error);
}

void run_items_beside(std::size_t count, const std::function<void(std::size_t)>& item) {
  if (count == 0) return;
  if (count == 1) {  // nothing to share
    item(0);
    return;
  }
  std::atomic<std::size_t> next{0};
  const auto share = [&] {
    for (std::size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1))
      item(i);
  };
  run_beside(share, share);
}

}  // namespace pipeplan
