// How long the kernel kept this process's threads waiting for a core (run-queue delay, the
// second field of /proc/self/task/*/schedstat): time a busy machine takes, not the code under
// test. Deadline tests add it to their margin, so that a bound on how late a decision comes
// back holds for the library whatever runs beside the test.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>

namespace rltest {

/// The run-queue delay summed over the process's threads so far; 0 where the kernel does not
/// report it. Threads that ended before the call are not counted: take it around a section
/// whose threads outlive it.
inline std::chrono::nanoseconds run_queue_wait() {
  std::int64_t total = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "schedstat");
    std::int64_t on_cpu = 0, waiting = 0;
    if (in >> on_cpu >> waiting) total += waiting;
  }
  return std::chrono::nanoseconds{total};
}

}  // namespace rltest
