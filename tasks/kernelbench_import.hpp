#pragma once
// `kforge tasks import-kernelbench PATH... --out FILE`: KernelBench problem files (a PyTorch
// `class Model(nn.Module)` with get_inputs() and get_init_inputs()) into kforge tasks, by
// tasks/kernelbench/import_kernelbench.py under the machine's Python torch (docs/kernelbench.md).
// The problems it cannot convert are listed with their reasons; every task it writes is then
// parsed here, so a file that comes out is one kforge reads.

#include <iosfwd>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace kforge::tasks {

struct kernelbench_import_options {
  std::vector<std::string> paths;  ///< problem files, or folders of them
  std::string out;                 ///< task file to write (JSON Lines)
  std::string failures;            ///< JSON Lines of the problems not converted (empty: none)
  int scale = 1;                   ///< size globals divided by this, for a quick check (>= 1)
  double cpu_budget_gib = 2.0;     ///< inputs and parameters a trace on the CPU may hold
  int jobs = 0;                    ///< problems converted at once; 0: the cores, at most 8
};

/// The Python that imports torch: $KFORGE_PYTHON, else `python3`, else /usr/bin/python3 (Debian's
/// python3-torch where another python3 comes first in PATH). An error says what was tried.
result<std::string> python_with_torch();

/// Runs the import; 0 when it ran (some problems may be listed as not imported), 2 on bad input,
/// 1 when the script failed or wrote a task kforge cannot read.
int import_kernelbench(const kernelbench_import_options& o, std::ostream& out, std::ostream& err);

}  // namespace kforge::tasks
