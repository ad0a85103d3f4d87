#include "config_watcher.hpp"

#include <iostream>

#include "server_algorithms.hpp"
#include "settings.hpp"

namespace ratelimit::server {

ConfigWatcher::ConfigWatcher(std::shared_ptr<Service> service, std::filesystem::path dir,
                             bool ignore_dotfiles, DomainMerge merge)
    : service_(std::move(service)),
      dir_(std::move(dir)),
      ignore_dotfiles_(ignore_dotfiles),
      merge_(merge) {}

ConfigWatcher::~ConfigWatcher() { stop(); }

std::string ConfigWatcher::signature() const {
  std::string sig;
  std::error_code ec;
  for (const auto& f : rules_files(dir_, ignore_dotfiles_)) {
    sig += f.string();
    sig += '\0';
    sig += std::to_string(std::filesystem::file_size(f, ec));
    sig += '\0';
    sig += std::to_string(std::filesystem::last_write_time(f, ec).time_since_epoch().count());
    sig += '\n';
  }
  return sig;
}

bool ConfigWatcher::poll() {
  const std::lock_guard lock(mutex_);
  const std::string sig = signature();
  if (!first_ && sig == seen_) return false;
  first_ = false;
  seen_ = sig;
  try {
    const auto files = rules_files(dir_, ignore_dotfiles_);
    service_->reload(RulesConfig::from_files<ServerAlgorithms>(
        std::span<const std::filesystem::path>(files), merge_));
    loaded_ = loaded_ || !files.empty();
    error_.clear();
    if (const auto& stats = service_->stats()) stats->on_config_load(true);
    return true;
  } catch (const std::exception& e) {
    // As the reference: the error is reported and the configuration in force stays.
    error_ = e.what();
    if (const auto& stats = service_->stats()) stats->on_config_load(false);
    std::cerr << "ratelimit_server: error loading new configuration from " << dir_.string() << ": "
              << error_ << " (the previous configuration stays in force)\n";
    return false;
  }
}

bool ConfigWatcher::loaded() const {
  const std::lock_guard lock(mutex_);
  return loaded_;
}

std::string ConfigWatcher::last_error() const {
  const std::lock_guard lock(mutex_);
  return error_;
}

void ConfigWatcher::start(std::chrono::milliseconds interval) {
  thread_ = std::thread([this, interval] {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, interval, [this] { return stopping_; })) {
      lock.unlock();
      poll();
      lock.lock();
    }
  });
}

void ConfigWatcher::stop() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ratelimit::server
