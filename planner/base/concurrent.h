// Two pieces of work at once on a 2-core machine: one offered to the process's helper thread,
// the other run by the caller, which also runs the first when the helper has not started it by
// then (a helper woken late costs nothing, where a thread per call made the caller wait for it
// to be scheduled and paid its start every time).
#pragma once

#include <cstddef>
#include <functional>

namespace pipeplan {

// Runs `offered` on the helper thread if it gets a core in time and `here` on this thread; once
// `here` is done, runs `offered` here unless the helper has started it, and returns when both
// have finished. Both may read the same data; neither may write what the other reads. An
// exception from `offered` propagates in preference to one from `here` (a check beside a step
// that assumes it: the check's error is the one that explains).
void run_beside(const std::function<void()>& offered, const std::function<void()>& here);

// Runs item(0) .. item(count - 1), each once, on this thread and the helper thread (run_beside),
// each taking the next index that neither has taken; returns when all have finished. Items may
// read the same data and each write its own. An exception from one ends its thread's share (the
// other thread, unless it throws too, runs the remaining items) and propagates once both threads
// have stopped.
void run_items_beside(std::size_t count, const std::function<void(std::size_t)>& item);

}  // namespace pipeplan
