#pragma once
// A test's work in a child process (fork), its one integer result back through a pipe: what
// several service instances, each with its own storage and connections, or an instance that
// dies without a word (SIGKILL: no destructor, no flush), look like to the shared Redis.
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>

#include <catch2/catch.hpp>

namespace rltest {

/// A child started by `spawn`: its pid and the pipe's read end (closed by `read_result`).
struct Child {
  pid_t pid;
  int fd;
  /// After writing its result: exit (status 0 iff the result was written), or stay, paused,
  /// until the test kills it.
  enum class After { exit, stay };
};

/// Runs `body` (returning an std::int64_t) in a forked child, which writes its result (-1 if
/// `body` threw) to a pipe, then exits or stays (`after`). Only the child runs `body`: a failed
/// check there is not seen, so `body` reports by its result.
template <class Body>
Child spawn(Body body, Child::After after = Child::After::exit) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::int64_t result = -1;
    try {
      result = body();
    } catch (...) {
      result = -1;
    }
    const auto written = ::write(fds[1], &result, sizeof result);
    if (written != static_cast<ssize_t>(sizeof result)) ::_exit(1);
    if (after == Child::After::stay)
      for (;;) ::pause();  // until killed
    ::_exit(0);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

/// The child's result, once written (blocks until then); -2 if the child ended without one.
inline std::int64_t read_result(Child& c) {
  std::int64_t result = 0;
  const auto got = ::read(c.fd, &result, sizeof result);
  ::close(c.fd);
  c.fd = -1;
  return got == static_cast<ssize_t>(sizeof result) ? result : -2;
}

/// Waits for the child to end; returns its wait status (see waitpid).
inline int wait_for(const Child& c) {
  int status = 0;
  REQUIRE(::waitpid(c.pid, &status, 0) == c.pid);
  return status;
}

/// The result of a child that exits: `read_result`, or -3 if it did not exit with status 0.
inline std::int64_t collect(Child c) {
  const std::int64_t result = read_result(c);
  const int status = wait_for(c);
  if (result == -2 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -3;
  return result;
}

}  // namespace rltest
