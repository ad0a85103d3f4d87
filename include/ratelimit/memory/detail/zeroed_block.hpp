#pragma once
/// @file memory/detail/zeroed_block.hpp
/// Zero-filled memory for the in-memory table's slot arrays that goes back to the kernel when
/// freed, and whose pages can be given back early, a prefix at a time.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

namespace ratelimit::detail {

/// A zero-filled block of at least `bytes` bytes, aligned to `align` (at most a page).
///
/// Why not calloc alone: glibc serves a large calloc with mmap only until the first such chunk
/// is freed; then it raises its mmap threshold (up to 32 MiB), so the next arrays come from the
/// heap, and a freed heap array stays resident (the heap is trimmed only from its top). A table
/// that grows by resizing frees every earlier array: measured at 1,000,000 keys, resident
/// memory was the sum of all of them. So a block of a page or more is an anonymous private
/// mapping of its own: its pages are the kernel's zero page until first written (nothing is
/// written here: a fresh array costs no page faults until keys land in it), `munmap` gives
/// them back at once, and `release_prefix` gives back the start of a block whose slots were
/// already moved out (madvise MADV_DONTNEED: the pages read as zeros again, and stop counting
/// as resident). Smaller blocks come from calloc (a page per shard for 8 slots would waste).
/// Throws std::bad_alloc if the memory is not available.
/// Thread safety: none (owned by one shard, used under its lock).
class ZeroedBlock {
 public:
  ZeroedBlock() = default;
  ZeroedBlock(std::size_t bytes, std::size_t align) {
    const std::size_t page = page_size();
    if (bytes >= page) {
      mapped_ = (bytes + page - 1) / page * page;
      void* p =
          ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      base_ = p;
      data_ = p;
    } else {
      small_ = bytes;
      base_ = std::calloc(bytes + align, 1);
      if (base_ == nullptr) throw std::bad_alloc();
      const auto at = reinterpret_cast<std::uintptr_t>(base_);
      data_ = reinterpret_cast<void*>((at + align - 1) / align * align);
    }
  }
  ZeroedBlock(ZeroedBlock&& o) noexcept
      : base_(std::exchange(o.base_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        mapped_(std::exchange(o.mapped_, 0)),
        small_(std::exchange(o.small_, 0)),
        released_(std::exchange(o.released_, 0)) {}
  ZeroedBlock& operator=(ZeroedBlock&& o) noexcept {
    if (this != &o) {
      reset();
      base_ = std::exchange(o.base_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      mapped_ = std::exchange(o.mapped_, 0);
      small_ = std::exchange(o.small_, 0);
      released_ = std::exchange(o.released_, 0);
    }
    return *this;
  }
  ZeroedBlock(const ZeroedBlock&) = delete;
  ZeroedBlock& operator=(const ZeroedBlock&) = delete;
  ~ZeroedBlock() { reset(); }

  /// The aligned start of the block (null if empty).
  void* data() const noexcept { return data_; }

  /// Usable bytes from data() (at least those asked for).
  std::size_t size() const noexcept { return mapped_ != 0 ? mapped_ : small_; }

  /// For a block kept to be used again: a mapping gives all its pages back to the kernel (they
  /// read as zeros again) and returns true; a calloc'd block is left as it is (false: the caller
  /// clears what it needs).
  bool recycle() noexcept {
    if (mapped_ == 0) return false;
    // A failure leaves the pages resident and their contents: the caller must not rely on
    // zeros then, so it is reported as not recycled.
    if (::madvise(base_, mapped_, MADV_DONTNEED) != 0) return false;
    released_ = 0;
    return true;
  }

  /// Gives the whole pages of the first `bytes` bytes back to the kernel, if the block is a
  /// mapping and at least `batch` bytes more than last time are due (one system call per
  /// batch, not per page); the caller no longer reads or writes them (they would read as
  /// zeros, and a write would take a fresh page). A no-op for a calloc'd block.
  void release_prefix(std::size_t bytes, std::size_t batch) noexcept {
    if (mapped_ == 0) return;
    const std::size_t page = page_size();
    const std::size_t upto = std::min(bytes, mapped_) / page * page;
    if (upto < released_ + batch && upto != mapped_) return;
    if (upto <= released_) return;
    // A failure leaves the pages resident: memory not given back yet, nothing incorrect.
    (void)::madvise(static_cast<char*>(base_) + released_, upto - released_, MADV_DONTNEED);
    released_ = upto;
  }

  /// Frees the block (munmap or free).
  void reset() noexcept {
    if (mapped_ != 0)
      ::munmap(base_, mapped_);
    else
      std::free(base_);
    base_ = data_ = nullptr;
    mapped_ = small_ = released_ = 0;
  }

 private:
  static std::size_t page_size() noexcept {
    static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return page;
  }

  void* base_ = nullptr;
  void* data_ = nullptr;
  std::size_t mapped_ = 0;    ///< bytes mapped (0: calloc'd)
  std::size_t small_ = 0;     ///< bytes asked of calloc (0: mapped)
  std::size_t released_ = 0;  ///< bytes at the start given back by release_prefix
};

}  // namespace ratelimit::detail
