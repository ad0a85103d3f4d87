#pragma once
/// @file config_watcher.hpp
/// Loads the rules files of a directory into a `Service` and reloads them when they change, as
/// the reference reloads its runtime directory: a file that does not load leaves the previous
/// configuration in force, and the error is reported.

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include "service.hpp"

namespace ratelimit::server {

/// Watches one directory by polling it (names, sizes and modification times of its rules
/// files, so that a symlink swap of the runtime root is seen as well).
/// Thread safety: `poll`, `loaded` and `last_error` are safe from many threads; `start` and
/// `stop` from one.
class ConfigWatcher {
 public:
  ConfigWatcher(std::shared_ptr<Service> service, std::filesystem::path dir, bool ignore_dotfiles,
                DomainMerge merge);
  ~ConfigWatcher();

  /// Reloads if the files changed since the last look (the first call always loads). Returns
  /// true if a new configuration is in force. On failure, the old configuration stays, and
  /// `last_error` says why ("FILE:LINE: problem").
  bool poll();
  /// Whether a configuration with at least one rules file has been loaded.
  bool loaded() const;
  /// The last load's error, "" after a success.
  std::string last_error() const;

  /// Polls every `interval` on a thread of its own until `stop`.
  void start(std::chrono::milliseconds interval);
  void stop();

 private:
  std::string signature() const;

  std::shared_ptr<Service> service_;
  std::filesystem::path dir_;
  bool ignore_dotfiles_;
  DomainMerge merge_;
  mutable std::mutex mutex_;
  std::string seen_;
  bool first_ = true;
  bool loaded_ = false;
  std::string error_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ratelimit::server
