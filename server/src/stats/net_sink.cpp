#include "stats/net_sink.hpp"

#include <cerrno>
#include <cstring>
#include <iostream>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ratelimit::server::stats {

namespace {

/// The reference's makePatternHandler: each `$n` becomes group n of the match, kept as written
/// when there is no such group.
std::string expand_pattern(const std::string& pattern, const std::smatch& m) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '$' && i + 1 < pattern.size() &&
        std::isdigit(static_cast<unsigned char>(pattern[i + 1]))) {
      std::size_t j = i + 1;
      while (j < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[j]))) ++j;
      const std::string digits = pattern.substr(i + 1, j - i - 1);
      const std::size_t n = digits.size() > 6 ? m.size() : std::stoul(digits);
      out += n < m.size() ? m[n].str() : pattern.substr(i, j - i);
      i = j - 1;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

/// Milliseconds as gostats and datadog-go print them: an integer when whole.
std::string format_ms(double ms) {
  if (ms >= 0 && ms < 1e18 && static_cast<double>(static_cast<std::uint64_t>(ms)) == ms)
    return std::to_string(static_cast<std::uint64_t>(ms));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", ms);
  return buf;
}

/// The largest datagram gostats sends over UDP (defaultBufferSizeUDP, no fragmentation).
constexpr std::size_t udp_payload = 1432;

}  // namespace

std::pair<std::string, std::vector<std::string>> NetSink::mogrify(
    std::string_view name, const std::vector<Mogrifier>& mogrifiers) {
  std::vector<std::string> tags;
  std::string short_name(name);
  // src/godogstats/dogstatsd_sink.go separateTags: EXTRA_TAGS as gostats appended them.
  constexpr std::string_view prefix = ".__";
  if (const auto at = name.find(prefix); at != std::string_view::npos) {
    short_name = std::string(name.substr(0, at));
    std::string_view rest = name.substr(at + prefix.size());
    while (true) {
      const auto next = rest.find(prefix);
      const std::string_view pair = rest.substr(0, next);
      if (const auto eq = pair.find('='); eq != std::string_view::npos)
        tags.push_back(std::string(pair.substr(0, eq)) + ":" + std::string(pair.substr(eq + 1)));
      if (next == std::string_view::npos) break;
      rest = rest.substr(next + prefix.size());
    }
  }
  for (const Mogrifier& m : mogrifiers) {
    std::smatch match;
    if (!std::regex_search(short_name, match, m.pattern)) continue;
    std::string renamed = expand_pattern(m.name, match);
    for (const auto& [key, value] : m.tags)
      tags.push_back(key + ":" + expand_pattern(value, match));
    return {std::move(renamed), std::move(tags)};
  }
  return {std::move(short_name), std::move(tags)};
}

NetSink::NetSink(NetSinkOptions options) : options_(std::move(options)) {
  if (options_.dog) options_.udp = true;
  thread_ = std::thread([this] { run(); });
}

NetSink::~NetSink() { close(std::chrono::milliseconds{0}); }

void NetSink::append(std::string_view name, std::string_view value, std::string_view type) {
  std::string line;
  if (options_.dog) {
    auto [n, tags] = mogrify(name, options_.mogrifiers);
    line = std::move(n);
    line += ':';
    line += value;
    line += '|';
    line += type;
    for (std::size_t i = 0; i < tags.size(); ++i) {
      line += i == 0 ? "|#" : ",";
      line += tags[i];
    }
  } else {
    line.reserve(name.size() + value.size() + type.size() + 3);
    line += name;
    line += ':';
    line += value;
    line += '|';
    line += type;
  }
  line += '\n';
  bool wake = false;
  {
    const std::lock_guard lock(mutex_);
    if (stop_ || buffer_.size() + out_size_.load(std::memory_order_relaxed) + line.size() >
                     options_.max_buffered) {
      dropped_.fetch_add(line.size(), std::memory_order_relaxed);
      return;
    }
    buffer_ += line;
    wake = buffer_.size() >= 16 * 1024;
  }
  if (wake) wake_.notify_one();
}

void NetSink::counter(std::string_view name, std::uint64_t value) {
  append(name, std::to_string(value), "c");
}

void NetSink::timer(std::string_view name, double milliseconds) {
  append(name, format_ms(milliseconds), "ms");
}

void NetSink::flush() {
  {
    const std::lock_guard lock(mutex_);
    flush_wanted_ = true;
  }
  wake_.notify_one();
}

void NetSink::close(std::chrono::milliseconds deadline) {
  {
    const std::lock_guard lock(mutex_);
    if (stop_) {
      if (!thread_.joinable()) return;
    }
    stop_ = true;
    close_deadline_ = std::chrono::steady_clock::now() + deadline;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
  disconnect();
}

std::size_t NetSink::buffered() const {
  const std::lock_guard lock(mutex_);
  return buffer_.size() + out_size_.load(std::memory_order_relaxed);
}

std::vector<std::pair<std::string, std::uint64_t>> NetSink::own_stats() const {
  return {{options_.dog ? "dogstatsd.dropped_bytes" : "statsd.dropped_bytes", dropped_bytes()},
          {options_.dog ? "dogstatsd.sent_bytes" : "statsd.sent_bytes", sent_bytes()},
          {options_.dog ? "dogstatsd.buffered_bytes" : "statsd.buffered_bytes", buffered()}};
}

bool NetSink::connect_now() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_connect_) return false;
  next_connect_ = now + std::chrono::seconds{1};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = options_.udp ? SOCK_DGRAM : SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(options_.port);
  std::string error;
  if (const int rc = getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    error = gai_strerror(rc);
  } else {
    for (addrinfo* a = res; a != nullptr && fd_ < 0; a = a->ai_next) {
      const int fd =
          ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        // Waited here, on the writer's thread, never on a call's.
        pollfd p{fd, POLLOUT, 0};
        int err = 0;
        socklen_t len = sizeof err;
        if (::poll(&p, 1, 1000) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
            err == 0)
          rc = 0;
        else
          errno = err != 0 ? err : ETIMEDOUT;
      }
      if (rc == 0) {
        fd_ = fd;
      } else {
        error = std::strerror(errno);
        ::close(fd);
      }
    }
    freeaddrinfo(res);
  }
  if (fd_ >= 0) {
    warned_ = false;
    return true;
  }
  if (!warned_) {
    std::cerr << "ratelimit_server: " << (options_.dog ? "dogstatsd" : "statsd") << " at "
              << options_.host << ":" << options_.port << ": cannot connect (" << error
              << "); stats are dropped while it lasts, calls go on\n";
    warned_ = true;
  }
  return false;
}

void NetSink::disconnect() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  // A line cut by the lost connection is not resent in half.
  if (mid_line_) {
    const auto nl = out_.find('\n');
    out_.erase(0, nl == std::string::npos ? out_.size() : nl + 1);
    mid_line_ = false;
  }
}

bool NetSink::write_some() {
  while (!out_.empty()) {
    std::size_t n = out_.size();
    if (options_.udp) {
      // Whole lines per datagram, as gostats buffers them.
      if (n > udp_payload) {
        const auto nl = out_.rfind('\n', udp_payload - 1);
        n = nl == std::string::npos ? out_.find('\n') + 1 : nl + 1;
      }
    }
    const ssize_t w = ::send(fd_, out_.data(), n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (options_.udp) {
        // Nobody listening (ECONNREFUSED) or the like: the datagram is lost, as UDP's are.
        dropped_.fetch_add(n, std::memory_order_relaxed);
        out_.erase(0, n);
        continue;
      }
      return false;
    }
    sent_.fetch_add(static_cast<std::uint64_t>(w), std::memory_order_relaxed);
    mid_line_ = static_cast<std::size_t>(w) > 0 && out_[static_cast<std::size_t>(w) - 1] != '\n';
    out_.erase(0, static_cast<std::size_t>(w));
    out_size_.store(out_.size(), std::memory_order_relaxed);
  }
  return true;
}

void NetSink::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait_for(lock, std::chrono::milliseconds{200},
                   [this] { return stop_ || flush_wanted_ || buffer_.size() >= 16 * 1024; });
    const bool stopping = stop_;
    const auto deadline = close_deadline_;
    flush_wanted_ = false;
    if (!buffer_.empty()) {
      out_ += buffer_;
      buffer_.clear();
      out_size_.store(out_.size(), std::memory_order_relaxed);
    }
    lock.unlock();
    do {
      if (out_.empty()) break;
      if (fd_ < 0 && !connect_now()) {
        if (!stopping) break;
      } else if (fd_ >= 0 && !write_some()) {
        disconnect();
        out_size_.store(out_.size(), std::memory_order_relaxed);
        continue;
      }
      if (!stopping || out_.empty() || std::chrono::steady_clock::now() >= deadline) break;
      // Shutdown: wait for the socket (at most until the deadline) and write the rest.
      if (fd_ >= 0) {
        pollfd p{fd_, POLLOUT, 0};
        (void)::poll(&p, 1, 50);
      } else {
        std::this_thread::sleep_until(
            std::min(deadline, next_connect_));  // the next connection attempt
      }
    } while (std::chrono::steady_clock::now() < deadline);
    lock.lock();
    if (stopping) {
      dropped_.fetch_add(out_.size(), std::memory_order_relaxed);
      out_.clear();
      out_size_.store(0, std::memory_order_relaxed);
      return;
    }
  }
}

}  // namespace ratelimit::server::stats
