// Counters on memcached as the reference's memcache backend keeps them
// (envoyproxy/ratelimit src/memcached/cache_impl.go with bradfitz/gomemcache): the same keys,
// values, expiries and servers, spoken in memcached's text protocol.
//
// One I/O thread per storage keeps one connection per server and pipelines on it every call of
// the moment: a call's `get` and its `incr`s go out together (memcached answers in order, the
// `get` before the `incr`s, so the values read are the ones before this call's hits, as the
// reference reads them), and whatever arrived while the thread was writing or reading goes out
// in its next single write. No gRPC thread waits on memcached and no call costs a thread of its
// own: the calls of one loop turn share one send, one poll and one recv per server.

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>

#include "counters.hpp"
#include "go_keys.hpp"

namespace ratelimit::server {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;
using Done = std::function<void(std::vector<HitResult>, std::exception_ptr)>;

/// gomemcache's legalKey: at most 250 bytes, none a space, a control character or DEL.
bool legal_key(std::string_view key) noexcept {
  if (key.size() > 250) return false;
  for (const char c : key)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return false;
  return true;
}

/// Most calls in flight at once. Beyond it a call is answered as if memcached had failed (every
/// value read as 0, nothing counted), as the reference treats a memcached error; it bounds the
/// memory a flood of calls can hold while memcached is slow.
constexpr std::size_t max_calls_in_flight = 65'536;
/// Most bytes of replies kept unparsed (a value is at most 1 MiB, as memcached's default item).
constexpr std::size_t max_unparsed = std::size_t{2} << 20;

/// One call: its hits and keys, the values read, and how many of its requests are unanswered.
/// Touched only by the I/O thread once submitted.
struct Job {
  std::vector<Hit> hits;
  std::vector<std::string> keys;  // per hit
  std::unordered_map<std::string, std::int64_t> values;
  std::chrono::nanoseconds now{};
  Done done;
  std::size_t left = 0;  // requests not yet answered (or failed)
};

/// One request on a connection, answered in order: a `get` of some of a job's keys, or one
/// key's `incr`, `add` (after a miss) or second `incr` (after another writer's add).
struct Step {
  enum class Kind { get, incr, add, incr_again };
  Kind kind = Kind::get;
  std::shared_ptr<Job> job;
  std::string key;  // incr, add, incr_again
  std::int64_t amount = 0;
  std::int64_t window_s = 1;
  SteadyTime deadline;
};

/// One memcached server and the loop's one connection to it.
struct Server {
  std::string host, port;
  int fd = -1;
  bool connecting = false;
  std::string out;  // bytes not yet written
  std::string in;   // bytes read, from `in_pos` not yet parsed
  std::size_t in_pos = 0;
  std::deque<Step> steps;  // written or in `out`, in order
};

class MemcacheCounters final : public Counters {
 public:
  MemcacheCounters(MemcacheOptions options, GoKeyOptions go)
      : timeout_(options.timeout), go_(std::move(go)) {
    if (options.servers.empty())
      throw std::invalid_argument("MEMCACHE_HOST_PORT = \"\": at least one server is needed");
    if (options.max_idle_conns < 0)
      throw std::invalid_argument(
          "MEMCACHE_MAX_IDLE_CONNS = " + std::to_string(options.max_idle_conns) + ": must be >= 0");
    for (const std::string& s : options.servers) {
      const auto colon = s.rfind(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
        throw std::invalid_argument("MEMCACHE_HOST_PORT = \"" + s + "\": expected host:port");
      std::string host = s.substr(0, colon);
      if (host.size() > 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
      servers_.push_back(std::make_unique<Server>());
      servers_.back()->host = std::move(host);
      servers_.back()->port = s.substr(colon + 1);
    }
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) throw std::runtime_error("eventfd: " + std::string(std::strerror(errno)));
    // The thread must never take a signal meant for the process (a server waiting for SIGTERM
    // with sigwait): it starts with every signal blocked.
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    try {
      thread_ = std::thread([this] { run(); });
    } catch (...) {
      pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      ::close(wake_fd_);
      throw;
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }

  MemcacheCounters(const MemcacheCounters&) = delete;
  MemcacheCounters& operator=(const MemcacheCounters&) = delete;

  ~MemcacheCounters() override {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake();
    thread_.join();
    ::close(wake_fd_);
  }

  /// Whether the caller is this storage's I/O thread (where its completions run).
  bool on_io_thread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }

  /// `count_async` and a wait. Not from a completion (the I/O thread would wait on itself).
  std::vector<HitResult> count(std::span<const Hit> hits, std::chrono::nanoseconds now) override {
    if (on_io_thread())
      throw std::runtime_error(
          "memcache: a blocking count inside a completion would wait on the "
          "I/O thread itself");
    return count_and_wait(hits, now);
  }

  /// Hands the call to the I/O thread (`done` runs there), or answers it here at once: an
  /// `algorithm` rule (an error), no hits, or too many calls in flight (values read as 0).
  void count_async(std::vector<Hit> hits, std::chrono::nanoseconds now, Done done) override {
    for (const Hit& h : hits)
      if (!h.algorithm.empty())
        return done({}, std::make_exception_ptr(std::runtime_error(
                            "rate_limit.algorithm = \"" + std::string(h.algorithm) +
                            "\": not on memcache (BACKEND_TYPE=memcache keeps only the "
                            "reference's fixed windows)")));
    auto job = std::make_shared<Job>();
    job->now = now;
    job->done = std::move(done);
    try {
      const std::int64_t now_s = detail::unix_seconds(now);
      job->keys.reserve(hits.size());
      for (const Hit& h : hits) job->keys.push_back(detail::go_counter_key(go_, h, now_s));
      job->hits = std::move(hits);
    } catch (...) {
      return job->done({}, std::current_exception());
    }
    if (job->hits.empty() || in_flight_.fetch_add(1) >= max_calls_in_flight) {
      if (!job->hits.empty()) in_flight_.fetch_sub(1);
      return finish(*job);
    }
    {
      const std::lock_guard lock(mutex_);
      incoming_.push_back(std::move(job));
    }
    wake();
  }

  std::vector<Decision> count_all(std::span<const Hit>, std::chrono::nanoseconds) override {
    throw std::runtime_error(
        "all or nothing is not on memcache (memcached cannot count several keys at once)");
  }

 private:
  /// gomemcache's ServerList.PickServer: CRC-32 (IEEE) of the key modulo the servers.
  Server& server_of(std::string_view key) const {
    if (servers_.size() == 1) return *servers_.front();
    const auto crc =
        ::crc32(0L, reinterpret_cast<const Bytef*>(key.data()), static_cast<uInt>(key.size()));
    return *servers_[crc % servers_.size()];
  }

  /// The reference's decision on each hit: the value read (0 when missing, unreadable, or
  /// memcached failed) plus its hits. Runs `done` (which must not throw) once.
  static void finish(Job& job) noexcept {
    std::vector<HitResult> out;
    try {
      out.reserve(job.hits.size());
      for (std::size_t i = 0; i < job.hits.size(); ++i) {
        const auto it = job.values.find(job.keys[i]);
        out.push_back(
            detail::go_result(job.hits[i], it == job.values.end() ? 0 : it->second, job.now));
      }
    } catch (...) {
      return job.done({}, std::current_exception());
    }
    job.done(std::move(out), nullptr);
  }

  /// Wakes the loop when it sleeps (or is about to): a busy loop finds `pending` before it
  /// sleeps, so the calls of a busy moment cost no eventfd write. Either the loop sees
  /// `pending` after arming, or this sees `armed` after setting `pending`.
  void wake() noexcept {
    pending_.store(true);
    if (!armed_.load() || !armed_.exchange(false)) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
  }

  void run() {
    std::vector<pollfd> fds;
    for (;;) {
      pending_.exchange(false);
      std::vector<std::shared_ptr<Job>> jobs;
      bool stop = false;
      {
        const std::lock_guard lock(mutex_);
        jobs.swap(incoming_);
        stop = stopping_;
      }
      for (auto& job : jobs) queue(std::move(job));
      if (stop) {
        for (auto& s : servers_) fail(*s);
        return;
      }
      const SteadyTime now = std::chrono::steady_clock::now();
      std::optional<SteadyTime> until;
      fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
      for (auto& sp : servers_) {
        Server& s = *sp;
        if (!s.steps.empty() && s.steps.front().deadline <= now) fail(s);
        if (s.steps.empty()) {
          // Idle, still polled: a connection memcached closes meanwhile is closed here too,
          // rather than found closed by the next call's requests.
          if (s.fd >= 0 && !s.connecting) fds.push_back(pollfd{s.fd, POLLIN, 0});
          continue;
        }
        if (s.fd < 0 && !connect(s)) continue;
        if (!s.connecting && !s.out.empty() && !flush(s)) continue;
        fds.push_back(pollfd{
            s.fd, static_cast<short>(POLLIN | (s.connecting || !s.out.empty() ? POLLOUT : 0)), 0});
        if (!until || s.steps.front().deadline < *until) until = s.steps.front().deadline;
      }
      int timeout_ms = -1;
      if (until)
        timeout_ms =
            static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(*until - now).count());
      armed_.store(true);
      if (pending_.load()) timeout_ms = 0;
      if (::poll(fds.data(), fds.size(), std::max(timeout_ms, until ? 0 : -1)) < 0)
        for (auto& f : fds) f.revents = 0;
      armed_.store(false);
      if (fds[0].revents != 0) {
        std::uint64_t count = 0;
        [[maybe_unused]] const auto n = ::read(wake_fd_, &count, sizeof count);
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        for (auto& sp : servers_)
          if (sp->fd == fds[i].fd) handle(*sp, fds[i].revents);
      }
    }
  }

  /// A job's requests, per server: one `get` of its distinct keys there (none when a key is
  /// malformed: gomemcache's GetMulti then refuses every key, which read as 0), then an `incr`
  /// of each counted hit's key (the reference's increaseAsync; a malformed key is not counted).
  void queue(std::shared_ptr<Job> job) {
    const SteadyTime deadline = std::chrono::steady_clock::now() + timeout_;
    bool all_legal = true;
    for (const std::string& k : job->keys) all_legal = all_legal && legal_key(k);
    if (all_legal) {
      std::unordered_map<Server*, std::vector<const std::string*>> by_server;
      for (const std::string& k : job->keys) {
        auto& list = by_server[&server_of(k)];
        if (std::find_if(list.begin(), list.end(), [&](const std::string* o) { return *o == k; }) ==
            list.end())
          list.push_back(&k);
      }
      for (auto& [server, list] : by_server) {
        server->out += "get";
        for (const std::string* k : list) {
          server->out += ' ';
          server->out += *k;
        }
        server->out += "\r\n";
        server->steps.push_back(Step{Step::Kind::get, job, {}, 0, 1, deadline});
        ++job->left;
      }
    }
    for (std::size_t i = 0; i < job->hits.size(); ++i) {
      const Hit& h = job->hits[i];
      if (h.get || !legal_key(job->keys[i])) continue;
      Step step{Step::Kind::incr, job, job->keys[i], h.hits > 0 ? h.hits : 0, h.window_s, deadline};
      send(server_of(step.key), std::move(step));
    }
    if (job->left == 0) done_one(*job, true);
  }

  /// Queues `step`'s request on `s` (the job counts it as unanswered).
  void send(Server& s, Step&& step) {
    const std::string amount = std::to_string(step.amount);
    if (step.kind == Step::Kind::add) {
      // memcached reads an expiry beyond 30 days as a Unix time: the reference sends it anyway,
      // and so does this, so that both keep the same keys alive as long.
      s.out += "add " + step.key + " 0 " + std::to_string(detail::go_expiry_s(go_, step.window_s)) +
               " " + std::to_string(amount.size()) + "\r\n" + amount + "\r\n";
    } else {
      s.out += "incr " + step.key + " " + amount + "\r\n";
    }
    ++step.job->left;
    s.steps.push_back(std::move(step));
  }

  /// One of the job's requests is answered (or failed); the last one answers the call.
  void done_one(Job& job, bool none = false) {
    if (!none && --job.left != 0) return;
    in_flight_.fetch_sub(1);
    finish(job);
  }

  /// Closes `s`'s connection, if any: every request on it is answered as failed (its values
  /// read as 0, its counting dropped, as the reference logs and drops increaseAsync's errors).
  void fail(Server& s) {
    if (s.fd >= 0) ::close(s.fd);
    s.fd = -1;
    s.connecting = false;
    s.out.clear();
    s.in.clear();
    s.in_pos = 0;
    std::deque<Step> steps;
    steps.swap(s.steps);
    for (Step& step : steps) done_one(*step.job);
  }

  /// Starts a connection to `s` (a name is resolved here, on the I/O thread). False, with its
  /// requests failed, when none can start.
  bool connect(Server& s) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(s.host.c_str(), s.port.c_str(), &hints, &found) != 0) {
      fail(s);
      return false;
    }
    for (addrinfo* a = found; a != nullptr && s.fd < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      const int one = 1;
      (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        s.fd = fd;
        s.connecting = false;
      } else if (errno == EINPROGRESS) {
        s.fd = fd;
        s.connecting = true;
      } else {
        ::close(fd);
      }
    }
    ::freeaddrinfo(found);
    if (s.fd < 0) fail(s);
    return s.fd >= 0;
  }

  /// Writes what `s` has to send; false (its requests failed) on an error.
  bool flush(Server& s) {
    std::size_t sent = 0;
    while (sent < s.out.size()) {
      const ssize_t n = ::send(s.fd, s.out.data() + sent, s.out.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      fail(s);
      return false;
    }
    s.out.erase(0, sent);
    return true;
  }

  void handle(Server& s, short revents) {
    if (s.connecting) {
      if ((revents & (POLLOUT | POLLERR | POLLHUP)) == 0) return;
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return fail(s);
      s.connecting = false;
      if (!flush(s)) return;
    } else if ((revents & POLLOUT) != 0 && !flush(s)) {
      return;
    }
    if ((revents & (POLLIN | POLLERR | POLLHUP)) == 0) return;
    char chunk[65'536];
    for (;;) {
      const ssize_t n = ::recv(s.fd, chunk, sizeof chunk, 0);
      if (n > 0) {
        s.in.append(chunk, static_cast<std::size_t>(n));
        if (static_cast<std::size_t>(n) == sizeof chunk && s.in.size() - s.in_pos < max_unparsed)
          continue;
        break;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return fail(s);  // closed by memcached, or an error
    }
    parse(s);
  }

  /// Answers the requests whose replies are complete in `s.in`, in order.
  void parse(Server& s) {
    while (!s.steps.empty()) {
      const int r = s.steps.front().kind == Step::Kind::get ? parse_get(s) : parse_line(s);
      if (r < 0) return fail(s);
      if (r == 0) break;
    }
    // A reply nobody asked for is not memcached's: the connection is not trusted again.
    if (s.in.size() - s.in_pos > (s.steps.empty() ? 0 : max_unparsed)) return fail(s);
    if (s.in_pos == s.in.size()) {
      s.in.clear();
      s.in_pos = 0;
    } else if (s.in_pos > 65'536) {
      s.in.erase(0, s.in_pos);
      s.in_pos = 0;
    }
  }

  /// The front `get`'s reply: `VALUE <key> <flags> <bytes>` and its data block per key found,
  /// then `END`. 1 when answered, 0 when incomplete, -1 on a protocol error.
  int parse_get(Server& s) {
    std::size_t p = s.in_pos;
    std::vector<std::pair<std::string, std::int64_t>> got;
    for (;;) {
      const auto eol = s.in.find("\r\n", p);
      if (eol == std::string::npos) return s.in.size() - p > 65'536 ? -1 : 0;
      const std::string_view line(s.in.data() + p, eol - p);
      if (line == "END") {
        s.in_pos = eol + 2;
        Step step = std::move(s.steps.front());
        s.steps.pop_front();
        for (auto& [k, v] : got) step.job->values[k] = v;
        done_one(*step.job);
        return 1;
      }
      if (line.rfind("VALUE ", 0) != 0) return -1;
      const auto k_end = line.find(' ', 6);
      const auto f_end = k_end == std::string_view::npos ? k_end : line.find(' ', k_end + 1);
      if (f_end == std::string_view::npos) return -1;
      std::size_t bytes = 0;
      const char* b = line.data() + f_end + 1;
      const char* e = line.data() + line.size();
      const auto [stop, ec] = std::from_chars(b, e, bytes);
      if (ec != std::errc{} || (stop != e && *stop != ' ') || bytes > (1U << 20)) return -1;
      const std::size_t data = eol + 2;
      if (s.in.size() < data + bytes + 2) return 0;
      if (s.in.compare(data + bytes, 2, "\r\n") != 0) return -1;
      std::int64_t v = 0;
      // strconv.ParseInt(value, 10, 32): a value beyond int32 or not decimal reads as 0.
      const char* vb = s.in.data() + data;
      const auto [vs, vec] = std::from_chars(vb, vb + bytes, v);
      if (vec != std::errc{} || vs != vb + bytes || v > INT32_MAX || v < INT32_MIN) v = 0;
      got.emplace_back(std::string(line.substr(6, k_end - 6)), v);
      p = data + bytes + 2;
    }
  }

  /// The front `incr` or `add`'s one-line reply; a miss queues the `add`, an `add` another
  /// writer won queues the second `incr`. 1 when answered, 0 when incomplete.
  int parse_line(Server& s) {
    const auto eol = s.in.find("\r\n", s.in_pos);
    if (eol == std::string::npos) return s.in.size() - s.in_pos > 65'536 ? -1 : 0;
    const std::string_view line(s.in.data() + s.in_pos, eol - s.in_pos);
    s.in_pos = eol + 2;
    Step step = std::move(s.steps.front());
    s.steps.pop_front();
    const SteadyTime deadline = std::chrono::steady_clock::now() + timeout_;
    if (step.kind == Step::Kind::incr && line == "NOT_FOUND") {
      send(s, Step{Step::Kind::add, step.job, std::move(step.key), step.amount, step.window_s,
                   deadline});
    } else if (step.kind == Step::Kind::add && line == "NOT_STORED") {
      send(s, Step{Step::Kind::incr_again, step.job, std::move(step.key), step.amount,
                   step.window_s, deadline});
    }
    // Anything else (a count, STORED, an error reply) ends this key's counting, as the
    // reference's increaseAsync logs an error and goes on.
    done_one(*step.job);
    return 1;
  }

  std::vector<std::unique_ptr<Server>> servers_;  // touched only by the I/O thread after start
  std::chrono::milliseconds timeout_;
  GoKeyOptions go_;
  std::atomic<std::size_t> in_flight_{0};
  int wake_fd_ = -1;
  std::atomic<bool> pending_{false};  ///< calls were handed over since the loop last looked
  std::atomic<bool> armed_{false};    ///< the loop sleeps (or is about to) in poll
  std::mutex mutex_;                  // guards incoming_ and stopping_
  std::vector<std::shared_ptr<Job>> incoming_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace

std::shared_ptr<Counters> make_memcache_counters(MemcacheOptions options, GoKeyOptions go) {
  // A completion may hold the last handle (a call in flight when its configuration or its
  // server goes): deleting on the I/O thread would join that very thread. Another thread
  // deletes it then, while this one returns to its loop, finds it stopping and ends.
  return std::shared_ptr<MemcacheCounters>(new MemcacheCounters(std::move(options), std::move(go)),
                                           [](MemcacheCounters* c) {
                                             if (c->on_io_thread())
                                               std::thread([c] { delete c; }).detach();
                                             else
                                               delete c;
                                           });
}

}  // namespace ratelimit::server
