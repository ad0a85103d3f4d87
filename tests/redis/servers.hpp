#pragma once
/// @file servers.hpp
/// Real servers for the connection tests (TLS, ACL, Unix socket, Sentinel), started by the test
/// itself: a redis-server serving TLS with the certificates scripts/tls_certs.sh made, and a
/// Sentinel setup (a primary, a replica and three sentinels on loopback) whose primary a test can
/// kill. Plus the small tools those tests share: a temp dir, a free port, polling with a limit, and
/// a thread-safe record of `on_failure` reports.
///
/// The certificates are named by RATELIMIT_TEST_TLS_CERTS=DIR (scripts/test.sh makes them once
/// per run). Without it a TLS test FAILS, like a Redis test without its server (see
/// support/redis_backend.hpp: only RATELIMIT_TEST_REDIS_OPTOUT=1 outside CI=true skips).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <ratelimit/redis/options.hpp>

#include "redis_admin.hpp"
#include "support/redis_backend.hpp"

namespace rltest {

/// Polls `done()` every 10 ms until it holds; false once `limit` has passed. For waiting on
/// real servers (start, replication, failover) only: no assertion is about the time it took.
template <class F>
bool poll_until(F done, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  return true;
}

/// True if `text` contains `needle`, ignoring ASCII case (OpenSSL and Redis spell their errors
/// in either case).
inline bool contains_nocase(std::string_view text, std::string_view needle) {
  const auto lower = [](char c) { return std::tolower(static_cast<unsigned char>(c)); };
  return std::search(text.begin(), text.end(), needle.begin(), needle.end(),
                     [&](char a, char b) { return lower(a) == lower(b); }) != text.end();
}

/// A directory of this test's own under $TMPDIR (or /tmp), removed with everything in it when
/// the object dies. Kept short: a Unix socket path must fit in 108 bytes.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/rltest-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

/// Writes `content` to `path` (replacing it).
inline void write_file(const std::string& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  if (!out.flush()) throw std::runtime_error("cannot write " + path);
}

/// A loopback port nobody listens on right now: the kernel picks it for a socket bound to port
/// 0, which is closed again for the server to take.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot find a free port");
  return ntohs(addr.sin_port);
}

/// Every `on_failure` report of a storage, in order. The storage calls it from its I/O thread
/// and from deciding threads, so it locks; the callback shares the record, so a report that
/// arrives while the storage shuts down still has somewhere to go.
class FailureLog {
 public:
  FailureLog() : state_(std::make_shared<State>()) {}

  std::function<void(const ratelimit::RedisFailure&)> callback() const {
    return [state = state_](const ratelimit::RedisFailure& f) {
      const std::lock_guard lock(state->mutex);
      state->seen.push_back(f);
    };
  }

  std::vector<ratelimit::RedisFailure> snapshot() const {
    const std::lock_guard lock(state_->mutex);
    return state_->seen;
  }

  std::size_t count(ratelimit::RedisFailureKind kind) const {
    const auto seen = snapshot();
    return static_cast<std::size_t>(
        std::count_if(seen.begin(), seen.end(),
                      [kind](const ratelimit::RedisFailure& f) { return f.kind == kind; }));
  }

 private:
  struct State {
    std::mutex mutex;
    std::vector<ratelimit::RedisFailure> seen;
  };
  std::shared_ptr<State> state_;
};

/// The redis-server binary the tests start (RATELIMIT_REDIS_SERVER, or redis-server on PATH).
inline std::string redis_server_binary() {
  const char* binary = std::getenv("RATELIMIT_REDIS_SERVER");
  return binary != nullptr && *binary != '\0' ? binary : "redis-server";
}

/// No certificates: fails (throws), or exits 77 (skipped) when the developer opted out of the
/// Redis tests outside CI, as no_redis does.
[[noreturn]] inline void no_tls_certs(const std::string& why) {
  if (!env_is("CI", "true") && env_is("RATELIMIT_TEST_REDIS_OPTOUT", "1")) {
    std::cerr << "SKIPPED (RATELIMIT_TEST_REDIS_OPTOUT=1): " << why << "\n";
    std::exit(77);
  }
  throw std::runtime_error("TLS tests need the test certificates: " + why +
                           ". Run them through scripts/test.sh (it makes them), or run "
                           "scripts/tls_certs.sh DIR and set RATELIMIT_TEST_TLS_CERTS=DIR");
}

/// The test certificates (scripts/tls_certs.sh) in RATELIMIT_TEST_TLS_CERTS, checked once.
class TlsCerts {
 public:
  /// The full path of one of them, e.g. file("ca.crt"); "ca-dir" is the hashed CA directory.
  std::string file(std::string_view name) const { return dir_ + "/" + std::string(name); }

  static const TlsCerts& get() {
    static const TlsCerts certs = [] {
      (void)redis_endpoint();  // Redis tests are wanted at all: its absence is handled there
      const char* v = std::getenv("RATELIMIT_TEST_TLS_CERTS");
      if (v == nullptr || *v == '\0') no_tls_certs("RATELIMIT_TEST_TLS_CERTS is not set");
      TlsCerts c;
      c.dir_ = v;
      for (const char* name : {"ca.crt", "server.crt", "server.key", "other-ca.crt",
                               "other-server.crt", "other-server.key", "wrong-name.crt",
                               "wrong-name.key", "client.crt", "client.key", "ca-dir"})
        if (!std::filesystem::exists(c.file(name)))
          no_tls_certs("RATELIMIT_TEST_TLS_CERTS=" + c.dir_ + " has no " + name);
      return c;
    }();
    return certs;
  }

 private:
  std::string dir_;
};

inline const TlsCerts& tls_certs() { return TlsCerts::get(); }

/// A ThrowawayRedis that also serves TLS on a port of its own, with the given certificate and
/// key (file names in the test certificates). The plain port stays open for the test's own
/// checks (and for ThrowawayRedis to see it start); storages under test use `tls_port()`.
/// `require_client_certificate`: `--tls-auth-clients yes` (mutual TLS; clients must present a
/// certificate from the test CA) instead of `no`.
class TlsRedis {
 public:
  explicit TlsRedis(std::string_view cert = "server.crt", std::string_view key = "server.key",
                    bool require_client_certificate = false)
      : tls_port_(free_loopback_port()),
        server_({"--tls-port", std::to_string(tls_port_), "--tls-cert-file", tls_certs().file(cert),
                 "--tls-key-file", tls_certs().file(key), "--tls-ca-cert-file",
                 tls_certs().file("ca.crt"), "--tls-auth-clients",
                 require_client_certificate ? "yes" : "no"}) {}

  int tls_port() const { return tls_port_; }
  /// The plain (non-TLS) endpoint, for test-side commands.
  RedisEndpoint plain_endpoint() const { return server_.endpoint(); }

 private:
  int tls_port_;
  ThrowawayRedis server_;
};

/// The text of a string, status or error reply ("" for any other type).
inline std::string reply_text(const redisReply* r) {
  if (r == nullptr) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
      r->type == REDIS_REPLY_ERROR)
    return std::string(r->str, r->len);
  return {};
}

/// A sentinel process (`redis-server <conf> --sentinel`) on a free loopback port, with its
/// own config file (sentinels rewrite theirs, so it must be writable) monitoring the primary
/// at `primary_port` as "m": quorum 2, down after 500 ms, failover timeout 2 s. `extra`: more
/// config lines (an ACL user of the sentinel's own, say).
class SentinelProcess {
 public:
  SentinelProcess(const std::string& dir, const std::string& master_name, int primary_port,
                  const std::vector<std::string>& extra = {})
      : port_(free_loopback_port()), conf_(dir + "/sentinel-" + std::to_string(port_) + ".conf") {
    const std::string port = std::to_string(port_);
    const std::string primary = "127.0.0.1 " + std::to_string(primary_port);
    std::string conf;
    conf += "port " + port + "\n";
    conf += "bind 127.0.0.1\n";
    conf += "daemonize no\n";
    conf += "dir " + dir + "\n";
    conf += "sentinel monitor " + master_name + " " + primary + " 2\n";
    conf += "sentinel down-after-milliseconds " + master_name + " 500\n";
    conf += "sentinel failover-timeout " + master_name + " 2000\n";
    for (const auto& line : extra) conf += line + "\n";
    write_file(conf_, conf);
    start();
  }
  ~SentinelProcess() { kill(); }
  SentinelProcess(const SentinelProcess&) = delete;
  SentinelProcess& operator=(const SentinelProcess&) = delete;

  RedisEndpoint endpoint() const { return {"127.0.0.1", port_}; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  void start() {
    const std::string server = redis_server_binary();
    std::vector<std::string> args{server, conf_, "--sentinel"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) {
        ::dup2(null, 1);
        ::dup2(null, 2);
      }
      ::execvp(server.c_str(), argv.data());
      ::_exit(127);
    }
    // A sentinel answers PING like a server once it listens.
    const bool up = poll_until(
        [&] {
          int status = 0;
          if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            return true;  // exited: reported below
          }
          return redis_answers(endpoint());
        },
        std::chrono::seconds{10});
    if (pid_ < 0 || !up) {
      kill();
      no_redis("cannot start a sentinel (" + server + " " + conf_ + " --sentinel)");
    }
  }

  int port_;
  std::string conf_;
  pid_t pid_ = -1;
};

/// Redis made highly available by Sentinel, all on loopback: a primary, one replica
/// (`--replicaof`) in sync with it, and three sentinels monitoring it as `master_name`, each of
/// which knows the replica and the two other sentinels (so that a failover can be voted: quorum
/// 2, majority 2 of 3). Everything stops when the object dies. Getting there takes a few
/// seconds of real time (the sentinels discover each other through the primary every 2 s).
class SentinelSetup {
 public:
  static constexpr const char* master_name = "m";

  SentinelSetup()
      // No delay before a full sync (the default waits 5 s for more replicas to join).
      : primary_(std::vector<std::string>{"--repl-diskless-sync-delay", "0"}),
        replica_(std::vector<std::string>{"--replicaof", "127.0.0.1",
                                          std::to_string(primary_.endpoint().port),
                                          "--repl-diskless-sync-delay", "0"}) {
    RedisAdmin replica_admin(replica_.endpoint());
    if (!poll_until(
            [&] {
              return reply_text(replica_admin.run({"INFO", "replication"}).get())
                         .find("master_link_status:up") != std::string::npos;
            },
            std::chrono::seconds{30}))
      throw std::runtime_error("the replica did not sync with the primary within 30 s");
    for (int i = 0; i < 3; ++i)
      sentinels_.push_back(
          std::make_unique<SentinelProcess>(dir_.path(), master_name, primary_.endpoint().port));
    for (const auto& s : sentinels_) {
      RedisAdmin admin(s->endpoint());
      if (!poll_until(
              [&] {
                auto fields = master_fields(admin);
                return fields["num-slaves"] == "1" && fields["num-other-sentinels"] == "2";
              },
              std::chrono::seconds{30}))
        throw std::runtime_error("sentinel " + s->address() +
                                 " did not learn the replica and the other sentinels in 30 s");
    }
  }
  SentinelSetup(const SentinelSetup&) = delete;
  SentinelSetup& operator=(const SentinelSetup&) = delete;
  ~SentinelSetup() {
    for (auto& s : sentinels_) s->kill();  // first, so they stop reconfiguring the servers
  }

  ThrowawayRedis& primary() { return primary_; }
  ThrowawayRedis& replica() { return replica_; }

  /// "host:port" of each sentinel, for RedisSentinelOptions::sentinels.
  std::vector<std::string> sentinel_addresses() const {
    std::vector<std::string> out;
    for (const auto& s : sentinels_) out.push_back(s->address());
    return out;
  }

  /// The primary's port as the first sentinel reports it now (0 if it cannot tell).
  int reported_primary_port() const {
    RedisAdmin admin(sentinels_.front()->endpoint());
    auto r = admin.run({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", master_name});
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) return 0;
    return std::stoi(reply_text(r->element[1]));
  }

 private:
  /// SENTINEL MASTER's field/value pairs.
  static std::map<std::string, std::string> master_fields(RedisAdmin& admin) {
    std::map<std::string, std::string> fields;
    auto r = admin.run({"SENTINEL", "MASTER", master_name});
    if (r->type != REDIS_REPLY_ARRAY) return fields;
    for (std::size_t i = 0; i + 1 < r->elements; i += 2)
      fields[reply_text(r->element[i])] = reply_text(r->element[i + 1]);
    return fields;
  }

  TempDir dir_;  // the sentinels' config files; outlives them (declared first)
  ThrowawayRedis primary_;
  ThrowawayRedis replica_;
  std::vector<std::unique_ptr<SentinelProcess>> sentinels_;
};

}  // namespace rltest
