#pragma once
/// @file rules/detail/rounds.hpp
/// The all-or-nothing rounds of a descriptor-list request, apart from any storage: which
/// counters go into the next `decide_all`, and what its decisions mean for the request. Shared
/// by `RuleSet` and by the gRPC server's all-or-nothing counting, so that shadow- and quota-mode
/// limits drop out the same way in both.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../../core/decision.hpp"
#include "../result.hpp"

namespace ratelimit::detail {

/// The rounds of one request over its counters ("groups"): every round is one all-or-nothing
/// `decide_all` over the groups still in. A round that an enforced limit denies ends the request
/// (nothing spent); one that only shadow- or quota-mode limits (or checks) deny drops those and
/// goes again, so a request takes at most one round per group. Quota-mode limits deny the
/// request only when every one of them denies. A group that blocks (a limit of 0 that never
/// reaches the storage) is decided at `start`; when it denies the request, the one round left
/// is a dry run (`dry_run()`): the groups are only checked, nothing is spent.
/// Thread safety: a plain value; one request's rounds run one after the other.
class AllOrNothingRounds {
 public:
  /// How a group's denial counts.
  enum class Kind {
    enforced,  ///< denies the request
    shadow,    ///< drops out: the request goes on without it
    quota      ///< drops out, unless every quota-mode group of the request denies
  };

  /// Adds a group (its index is the number of groups before it). `check`: its denial never
  /// denies the request, whatever its kind (`RuleSet`: a descriptor of 0 hits); `blocks`: it
  /// never reaches the storage and denies with `blocked` (a limit of 0: `blocked_decision()`;
  /// a counter locked out: the lock's denial), which must deny (`allowed` false).
  std::size_t add(Kind kind, bool check, bool blocks,
                  const Decision& blocked = blocked_decision()) {
    groups_.push_back(Group{kind, check, blocks, !blocks, blocked});
    return groups_.size() - 1;
  }

  /// Decides the blocking groups; call once, after the last `add`.
  void start() {
    for (const Group& g : groups_) {
      if (g.kind == Kind::quota) ++quota_total_;
      if (!g.blocks) continue;
      if (g.kind == Kind::enforced && !g.check) denied_ = true;
      if (g.kind == Kind::quota) ++quota_out_;
    }
    if (quota_total_ > 0 && quota_out_ == quota_total_) denied_ = true;
  }

  /// The groups of the next round (indices, ascending); empty when the request is decided.
  const std::vector<std::size_t>& next() {
    in_.clear();
    if (finished_) return in_;
    for (std::size_t k = 0; k < groups_.size(); ++k)
      if (groups_[k].active) in_.push_back(k);
    if (in_.empty()) finished_ = true;
    return in_;
  }

  /// Whether the round `next` gave only checks its groups (the request is already denied).
  bool dry_run() const noexcept { return denied_; }

  /// Takes the decisions of the round `next` gave (in its order); `all`: the storage admitted
  /// every part (and spent).
  void absorb(std::span<const Decision> ds, bool all) {
    for (std::size_t k = 0; k < in_.size(); ++k) groups_[in_[k]].decision = ds[k];
    finished_ = true;
    if (all || denied_) return;
    bool dropped = false;
    for (const std::size_t k : in_) {
      Group& g = groups_[k];
      if (g.decision.allowed) continue;
      if (g.kind == Kind::enforced && !g.check) {
        denied_ = true;
      } else {
        g.active = false;
        dropped = true;
        if (g.kind == Kind::quota) ++quota_out_;
      }
    }
    if (quota_total_ > 0 && quota_out_ == quota_total_) denied_ = true;
    if (denied_) return;  // this round's decisions are the dry run's: nothing was spent
    if (!dropped) {       // a storage that denied without a denying part: deny, spend nothing
      denied_ = true;
      return;
    }
    finished_ = false;
  }

  /// Ends the rounds denied (a later round that the storage refused to start).
  void deny() noexcept {
    denied_ = true;
    finished_ = true;
  }

  /// Whether the request is denied (then nothing was spent anywhere).
  bool denied() const noexcept { return denied_; }
  /// Group `k`'s latest decision (`blocked_decision()` for a blocking group).
  const Decision& decision(std::size_t k) const { return groups_[k].decision; }
  /// The number of groups.
  std::size_t size() const noexcept { return groups_.size(); }

 private:
  struct Group {
    Kind kind;
    bool check;
    bool blocks;
    bool active;
    Decision decision;
  };
  std::vector<Group> groups_;
  std::vector<std::size_t> in_;
  bool denied_ = false;
  bool finished_ = false;
  std::size_t quota_total_ = 0, quota_out_ = 0;
};

}  // namespace ratelimit::detail
