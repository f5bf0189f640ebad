#pragma once
// Admission of candidates to one GPU by their estimated memory: claims are granted while they sum
// to at most the budget, and a claim larger than the whole budget is granted when no other is
// held (it runs alone rather than never). Plain logic, so the rule is tested without a GPU.
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace kforge::sandbox {

class memory_gate {
 public:
  /// 0: no limit (every claim is granted at once).
  void set_budget(std::int64_t bytes);
  std::int64_t claimed() const;

  /// Held for a candidate's whole run; released on destruction.
  class claim {
   public:
    claim(memory_gate& g, std::int64_t bytes);
    ~claim();
    claim(const claim&) = delete;
    claim& operator=(const claim&) = delete;

   private:
    memory_gate& gate_;
    std::int64_t bytes_ = 0;  ///< 0: nothing held (no limit, or a claim of nothing)
  };

 private:
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::int64_t budget_ = 0;
  std::int64_t claimed_ = 0;
};

}  // namespace kforge::sandbox
