#pragma once
// `kforge pretrain`: supervised pretraining of a small policy (pretrain.hpp) from the command line.
// Checks every input before training starts, so that a wrong path or a nonsense size costs
// nothing: the flags' values (validate), the tokenizer directory, the data file (every line) and
// the output directory. Torch-free: pretrain.cpp holds the LibTorch side.

#include <iosfwd>

#include "trainer/pretrain.hpp"

namespace kforge::trainer {

/// Runs `kforge pretrain`; progress and the summary go to `out`, errors to `err`. Returns the exit
/// code: 0 when the checkpoint is written, 2 for bad input (a message naming the flag, file or
/// line; nothing is written), 1 when training itself fails (nothing is left at `o.out` either).
int pretrain_command(const pretrain_options& o, std::ostream& out, std::ostream& err);

}  // namespace kforge::trainer
