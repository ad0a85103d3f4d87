#pragma once
/// @file redis_admin.hpp
/// Test-side access to a Redis server: raw commands (SCAN, PTTL, SCRIPT FLUSH, SET...) to
/// inspect and disturb what the storage does, and a throwaway redis-server the fault tests can
/// kill and restart.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "redis/blocking_connection.hpp"

#include "support/redis_backend.hpp"

namespace rltest {

/// One connection for test-side commands. Throws on any failure.
class RedisAdmin {
 public:
  explicit RedisAdmin(const RedisEndpoint& e) : conn_(open(e)) {}

  /// Runs one command; returns the reply (error replies included).
  ratelimit::detail::RedisReplyPtr run(std::vector<std::string> args) {
    auto replies = conn_.pipeline({std::move(args)});
    return std::move(replies.front());
  }

  /// Every key matching `pattern` (SCAN, so a test never blocks the server with KEYS).
  std::vector<std::string> scan(const std::string& pattern) {
    std::vector<std::string> keys;
    std::string cursor = "0";
    do {
      auto r = run({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        throw std::runtime_error("SCAN: unexpected reply");
      cursor.assign(r->element[0]->str, r->element[0]->len);
      const redisReply* batch = r->element[1];
      for (std::size_t i = 0; i < batch->elements; ++i)
        keys.emplace_back(batch->element[i]->str, batch->element[i]->len);
    } while (cursor != "0");
    return keys;
  }

  std::int64_t integer(std::vector<std::string> args) {
    auto r = run(std::move(args));
    if (r->type != REDIS_REPLY_INTEGER) throw std::runtime_error("expected an integer reply");
    return r->integer;
  }

 private:
  static rltest::BlockingConnection open(const RedisEndpoint& e) {
    ratelimit::detail::RedisConnectionSettings s;
    s.connect_timeout = std::chrono::seconds{2};
    s.command_timeout = std::chrono::seconds{5};
    return rltest::BlockingConnection::open({e.host, e.port}, s);
  }
  rltest::BlockingConnection conn_;
};

/// A redis-server of this test's own (no persistence), on a free loopback port, stopped when
/// the object dies. `kill()` ends it abruptly (SIGKILL); `start()` brings it back on the same port.
class ThrowawayRedis {
 public:
  /// `extra`: more redis-server arguments (e.g. {"--enable-debug-command", "local"}).
  explicit ThrowawayRedis(std::vector<std::string> extra = {})
      : port_(pick_port()), extra_(std::move(extra)) {
    start();
  }
  ~ThrowawayRedis() { kill(); }
  ThrowawayRedis(const ThrowawayRedis&) = delete;
  ThrowawayRedis& operator=(const ThrowawayRedis&) = delete;

  RedisEndpoint endpoint() const { return {"127.0.0.1", port_}; }

  void start() {
    if (pid_ > 0) return;
    const char* binary = std::getenv("RATELIMIT_REDIS_SERVER");
    const std::string server = binary != nullptr ? binary : "redis-server";
    const std::string port = std::to_string(port_);
    // Built before fork: the child of a threaded process should not allocate.
    std::vector<std::string> args{server,   "--port",     port,           "--bind", "127.0.0.1",
                                  "--save", "",           "--appendonly", "no",     "--daemonize",
                                  "no",     "--loglevel", "warning",      "--dir",  "/tmp"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      // Quiet: the server's warnings (overcommit...) are noise in the test log.
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) {
        ::dup2(null, 1);
        ::dup2(null, 2);
      }
      ::execvp(server.c_str(), argv.data());
      ::_exit(127);
    }
    // Wait (real time: this is the server starting) until it answers.
    for (int i = 0; i < 200; ++i) {
      if (redis_answers(endpoint())) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        no_redis("cannot start " + server + " on port " + port);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{25});
    }
    kill();
    no_redis(server + " did not answer on port " + port);
  }

  /// Freezes the server (SIGSTOP): it keeps its sockets open and answers nothing.
  void pause() {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  /// Lets a paused server run again (SIGCONT).
  void resume() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }

  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);  // a paused server must be able to die
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  static int pick_port() {
    // The shared test server's presence says Redis is wanted; its absence is handled there.
    (void)redis_endpoint();
    // Bind port 0 to let the kernel pick a free port, then release it for redis-server.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw std::runtime_error("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(fd);
      throw std::runtime_error("cannot find a free port");
    }
    ::close(fd);
    return ntohs(addr.sin_port);
  }

  int port_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

}  // namespace rltest
