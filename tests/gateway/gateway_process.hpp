#pragma once
/// @file gateway_process.hpp
/// One examples/http_gateway process for the end-to-end tests (RATELIMIT_GATEWAY_EXE), and a
/// few HTTP helpers.

#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace rltest {

/// One gateway process: started with --port 0, its port read from its first output line.
class Gateway {
 public:
  explicit Gateway(std::vector<std::string> args) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv;
      std::string exe = RATELIMIT_GATEWAY_EXE;
      argv.push_back(exe.data());
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(exe.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fds[0];
    const std::string line = read_line(std::chrono::seconds{20});
    INFO("gateway said: " << line);
    const std::string marker = "listening on http://127.0.0.1:";
    REQUIRE(line.rfind(marker, 0) == 0);
    port_ = std::stoi(line.substr(marker.size()));
  }
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;
  ~Gateway() {
    if (pid_ > 0) (void)stop();
  }

  int port() const { return port_; }

  /// SIGTERM, then the exit status (0: a clean shutdown).
  int stop() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    close(out_);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  std::string read_line(std::chrono::milliseconds timeout) {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char c = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      if (read(out_, &c, 1) != 1) break;
      if (c == '\n') break;
      line += c;
    }
    return line;
  }

  pid_t pid_ = -1;
  int out_ = -1;
  int port_ = 0;
};

/// Writes `text` to `path` and returns the path.
inline std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

}  // namespace rltest
