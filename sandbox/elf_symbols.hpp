#pragma once
// What a built candidate library exports, imports and runs at load time, read from its ELF
// headers (64-bit little-endian: x86-64 and AArch64). No binutils needed, and nothing is loaded:
// the library is data here, never code.

#include <string>
#include <vector>

#include "common/result.hpp"

namespace kforge::sandbox {

struct elf_summary {
  std::vector<std::string> exported_functions;  ///< defined global/weak dynamic function symbols
  std::vector<std::string> imported;  ///< undefined dynamic symbols (what it calls out to)
  /// The weak ones among `imported`: they need no definition at link time and bind to whatever
  /// library defines the name at run time, if any.
  std::vector<std::string> weak_imported;
  /// Functions run when the library is loaded (.preinit_array, .init_array) and unloaded
  /// (.fini_array), named through the symbol tables; "0x..." where no symbol names the address.
  std::vector<std::string> init_functions;
  std::vector<std::string> fini_functions;
};

/// Reads `path`. Errors name the file and what is malformed.
result<elf_summary> read_elf_summary(const std::string& path);

}  // namespace kforge::sandbox
