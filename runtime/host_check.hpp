#pragma once
// `kforge run --check`: whether what a manifest needs is on this host — the policy model's files,
// the task files, the GPUs its groups name, nvcc for the real sandbox — one line per check, so a
// run that would fail at start-up (or hours in) is seen failing before anything starts.

#include <string>
#include <vector>

#include "config/manifest.hpp"
#include "runtime/readiness.hpp"

namespace kforge::pipeline {

/// One check: its name ("model", "tasks.files[0]", "gpus", "nvcc"), what it found, and whether
/// that is enough to run.
struct host_check {
  std::string name;
  bool ok = true;
  std::string detail;  ///< what is there when ok; the problem otherwise
};

/// The checks for `m` on a host with `h`: only for what a stage on this host needs (a stand-in
/// sampler needs no model, a stand-in sandbox no nvcc).
std::vector<host_check> host_checks(const manifest& m, const host_facts& h);

/// One line per check: "ok      NAME: DETAIL" or "PROBLEM NAME: DETAIL".
std::string format_host_checks(const std::vector<host_check>& checks);

/// Whether every check passed.
bool all_passed(const std::vector<host_check>& checks);

}  // namespace kforge::pipeline
