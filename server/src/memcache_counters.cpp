// Counters on memcached as the reference's memcache backend keeps them
// (envoyproxy/ratelimit src/memcached/cache_impl.go with bradfitz/gomemcache): the same keys,
// values, expiries and servers, spoken in memcached's text protocol.

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <condition_variable>
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

#include "counters.hpp"
#include "go_keys.hpp"

namespace ratelimit::server {
namespace {

/// gomemcache's legalKey: at most 250 bytes, none a space, a control character or DEL.
bool legal_key(std::string_view key) noexcept {
  if (key.size() > 250) return false;
  for (const char c : key)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return false;
  return true;
}

/// One connection to one memcached: a socket with a deadline per request.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() { ::close(fd_); }

  /// Writes all of `data` by `deadline`; false on an error or timeout.
  bool write_all(std::string_view data, std::chrono::steady_clock::time_point deadline) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      if (!wait(POLLOUT, deadline)) return false;
    }
    return true;
  }

  /// The next line without its CRLF; nullopt on an error, a timeout or a line over 64 KiB.
  std::optional<std::string> line(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      if (const auto eol = buf_.find("\r\n", pos_); eol != std::string::npos) {
        std::string out = buf_.substr(pos_, eol - pos_);
        pos_ = eol + 2;
        return out;
      }
      if (buf_.size() - pos_ > 65'536 || !fill(deadline)) return std::nullopt;
    }
  }

  /// The next `n` bytes and their CRLF (a value's data block).
  std::optional<std::string> block(std::size_t n, std::chrono::steady_clock::time_point deadline) {
    while (buf_.size() - pos_ < n + 2)
      if (!fill(deadline)) return std::nullopt;
    if (buf_.compare(pos_ + n, 2, "\r\n") != 0) return std::nullopt;
    std::string out = buf_.substr(pos_, n);
    pos_ += n + 2;
    return out;
  }

  /// Whether every byte read was used (a connection with leftovers is not reused).
  bool drained() const noexcept { return pos_ == buf_.size(); }

 private:
  bool wait(short events, std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
  }

  bool fill(std::chrono::steady_clock::time_point deadline) {
    if (pos_ > 0 && pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    }
    char chunk[16'384];
    for (;;) {
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n > 0) {
        buf_.append(chunk, static_cast<std::size_t>(n));
        return true;
      }
      if (n == 0) return false;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      if (!wait(POLLIN, deadline)) return false;
    }
  }

  int fd_;
  std::string buf_;
  std::size_t pos_ = 0;
};

/// One memcached server: its address and its idle connections (at most `max_idle`).
/// Thread safety: every member is safe from many threads.
class Server {
 public:
  Server(std::string host, std::string port, int max_idle)
      : host_(std::move(host)), port_(std::move(port)), max_idle_(max_idle) {}

  /// An idle connection, or a new one by `deadline`; null when memcached cannot be reached.
  std::unique_ptr<Connection> take(std::chrono::steady_clock::time_point deadline) {
    {
      const std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
    }
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host_.c_str(), port_.c_str(), &hints, &found) != 0) return nullptr;
    std::unique_ptr<Connection> out;
    for (addrinfo* a = found; a != nullptr && !out; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      const int one = 1;
      (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 || connected(fd, deadline))
        out = std::make_unique<Connection>(fd);
      else
        ::close(fd);
    }
    ::freeaddrinfo(found);
    return out;
  }

  /// Keeps `c` for the next request when there is room and it is clean; else closes it.
  void give_back(std::unique_ptr<Connection> c) {
    if (!c->drained()) return;
    const std::lock_guard lock(mutex_);
    if (static_cast<int>(idle_.size()) < max_idle_) idle_.push_back(std::move(c));
  }

 private:
  static bool connected(int fd, std::chrono::steady_clock::time_point deadline) {
    if (errno != EINPROGRESS) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(left.count()) + 1) <= 0) return false;
    int err = 0;
    socklen_t len = sizeof err;
    return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
  }

  std::string host_, port_;
  int max_idle_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

/// A few threads that run the calls, so that no caller waits on memcached.
class Workers {
 public:
  explicit Workers(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      threads_.emplace_back([this] {
        for (;;) {
          std::function<void()> task;
          {
            std::unique_lock lock(mutex_);
            ready_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
            if (tasks_.empty()) return;
            task = std::move(tasks_.front());
            tasks_.pop_front();
          }
          task();
        }
      });
  }
  ~Workers() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void post(std::function<void()> task) {
    {
      const std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
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
      servers_.push_back(
          std::make_unique<Server>(std::move(host), s.substr(colon + 1), options.max_idle_conns));
    }
    workers_ = std::make_unique<Workers>(
        static_cast<std::size_t>(std::max(2, std::min(options.max_idle_conns, 64))));
  }

  std::vector<HitResult> count(std::span<const Hit> hits, std::chrono::nanoseconds now) override {
    for (const Hit& h : hits)
      if (!h.algorithm.empty())
        throw std::runtime_error("rate_limit.algorithm = \"" + std::string(h.algorithm) +
                                 "\": not on memcache (BACKEND_TYPE=memcache keeps only the "
                                 "reference's fixed windows)");
    return decide_and_count(hits, now);
  }

  void count_async(std::vector<Hit> hits, std::chrono::nanoseconds now,
                   std::function<void(std::vector<HitResult>, std::exception_ptr)> done) override {
    workers_->post([this, hits = std::move(hits), now, done = std::move(done)]() {
      std::vector<HitResult> ds;
      try {
        ds = count(hits, now);
      } catch (...) {
        return done({}, std::current_exception());
      }
      done(std::move(ds), nullptr);
    });
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

  std::chrono::steady_clock::time_point deadline() const {
    return std::chrono::steady_clock::now() + timeout_;
  }

  /// The reference's DoLimit and increaseAsync, one after the other: each hit decided, and its
  /// count reported, as the value read plus its hits (the count the reference's stats use).
  std::vector<HitResult> decide_and_count(std::span<const Hit> hits, std::chrono::nanoseconds now) {
    const std::int64_t now_s = detail::unix_seconds(now);
    std::vector<std::string> keys;
    keys.reserve(hits.size());
    bool all_legal = true;
    for (const Hit& h : hits) {
      keys.push_back(detail::go_counter_key(go_, h, now_s));
      all_legal = all_legal && legal_key(keys.back());
    }
    // GetMulti refuses every key when one is malformed (gomemcache): then all read as 0.
    std::unordered_map<std::string, std::int64_t> values;
    if (all_legal) values = get_multi(keys);
    std::vector<HitResult> out;
    out.reserve(hits.size());
    for (std::size_t i = 0; i < hits.size(); ++i) {
      const auto it = values.find(keys[i]);
      // A value that is not a count reads as 0, as the reference's ParseInt failure.
      out.push_back(detail::go_result(hits[i], it == values.end() ? 0 : it->second, now));
    }
    for (std::size_t i = 0; i < hits.size(); ++i)
      if (!hits[i].get && legal_key(keys[i]))
        increase(keys[i], hits[i].hits > 0 ? hits[i].hits : 0, hits[i].window_s);
    return out;
  }

  /// One `get` of several keys per server (the reference's GetMulti); a server that fails
  /// gives no values (its keys read as 0).
  std::unordered_map<std::string, std::int64_t> get_multi(const std::vector<std::string>& keys) {
    std::unordered_map<Server*, std::vector<const std::string*>> by_server;
    for (const std::string& k : keys) {
      auto& list = by_server[&server_of(k)];
      if (std::find_if(list.begin(), list.end(), [&](const std::string* o) { return *o == k; }) ==
          list.end())
        list.push_back(&k);
    }
    std::unordered_map<std::string, std::int64_t> out;
    for (auto& [server, list] : by_server) {
      const auto until = deadline();
      auto c = server->take(until);
      if (!c) continue;
      std::string request = "get";
      for (const std::string* k : list) {
        request += ' ';
        request += *k;
      }
      request += "\r\n";
      if (!c->write_all(request, until)) continue;
      bool ok = false;
      std::unordered_map<std::string, std::int64_t> got;
      for (;;) {
        const auto l = c->line(until);
        if (!l) break;
        if (*l == "END") {
          ok = true;
          break;
        }
        // VALUE <key> <flags> <bytes>
        if (l->rfind("VALUE ", 0) != 0) break;
        const auto k_end = l->find(' ', 6);
        const auto f_end = k_end == std::string::npos ? k_end : l->find(' ', k_end + 1);
        if (f_end == std::string::npos) break;
        std::size_t bytes = 0;
        const char* b = l->data() + f_end + 1;
        const char* e = l->data() + l->size();
        const auto [stop, ec] = std::from_chars(b, e, bytes);
        if (ec != std::errc{} || (stop != e && *stop != ' ') || bytes > (1U << 20)) break;
        const auto data = c->block(bytes, until);
        if (!data) break;
        std::int64_t v = 0;
        // strconv.ParseInt(value, 10, 32): a value beyond int32 or not decimal reads as 0.
        const auto [vs, vec] = std::from_chars(data->data(), data->data() + data->size(), v);
        if (vec != std::errc{} || vs != data->data() + data->size() || v > INT32_MAX ||
            v < INT32_MIN)
          v = 0;
        got[l->substr(6, k_end - 6)] = v;
      }
      if (!ok) continue;  // the connection is dropped with its leftovers
      out.merge(got);
      server->give_back(std::move(c));
    }
    return out;
  }

  /// The reference's increaseAsync for one key: incr; on a miss add the hits with the window
  /// plus jitter as expiry; if another writer added it meanwhile, incr again. Errors are
  /// dropped, as the reference logs and drops them.
  void increase(const std::string& key, std::int64_t hits, std::int64_t window_s) {
    Server& server = server_of(key);
    const auto until = deadline();
    auto c = server.take(until);
    if (!c) return;
    const std::string amount = std::to_string(hits);
    const auto incr = [&]() -> std::optional<bool> {  // true: counted, false: not found
      if (!c->write_all("incr " + key + " " + amount + "\r\n", until)) return std::nullopt;
      const auto l = c->line(until);
      if (!l) return std::nullopt;
      if (*l == "NOT_FOUND") return false;
      if (!l->empty() && l->find_first_not_of("0123456789") == std::string::npos) return true;
      return std::nullopt;
    };
    auto counted = incr();
    if (counted && !*counted) {
      // memcached reads an expiry beyond 30 days as a Unix time: the reference sends it anyway,
      // and so does this, so that both keep the same keys alive as long.
      const std::string expiry = std::to_string(detail::go_expiry_s(go_, window_s));
      if (!c->write_all("add " + key + " 0 " + expiry + " " + std::to_string(amount.size()) +
                            "\r\n" + amount + "\r\n",
                        until))
        return;
      const auto l = c->line(until);
      if (!l) return;
      if (*l == "NOT_STORED")
        counted = incr();
      else if (*l == "STORED")
        counted = true;
      else
        return;
    }
    if (counted && *counted) server.give_back(std::move(c));
  }

  std::vector<std::unique_ptr<Server>> servers_;
  std::chrono::milliseconds timeout_;
  GoKeyOptions go_;
  std::unique_ptr<Workers> workers_;  // last: its threads stop before the rest goes
};

}  // namespace

std::shared_ptr<Counters> make_memcache_counters(MemcacheOptions options, GoKeyOptions go) {
  return std::make_shared<MemcacheCounters>(std::move(options), std::move(go));
}

}  // namespace ratelimit::server
