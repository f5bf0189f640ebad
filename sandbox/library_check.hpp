#pragma once
// Static checks of the built library, the second line behind the source checks: whatever a
// candidate spelled, its imports say which functions it really calls (each must be on the import
// allowlist), its dynamic symbols say whether kf_forward is exported with C linkage, and its
// init/fini arrays say what runs when it is loaded or unloaded. Nothing is loaded to find out
// (elf_symbols.hpp). A compile-cache hit is checked again before its library is handed out.

#include <string>

#include "sandbox/elf_symbols.hpp"
#include "sandbox/static_check.hpp"

namespace kforge::sandbox {

/// ok; link_error when kf_forward is not exported (with C linkage, as a function); rejected for an
/// import a deny list names (static_rules.hpp forbidden_import, with that rule), an import outside
/// the allowlist (import_allowed, rule import_not_allowed), or load/unload-time code other than the
/// toolchain's own (nvcc's fatbinary registration, crtbegin's frame_dummy / global dtors). Static
/// initialisers show up as gcc's `_GLOBAL__sub_I_*` there, `__attribute__((constructor))` functions
/// under their own names.
static_verdict check_library(const elf_summary& elf, const library_permissions& perms);

/// Reads `so_path` and checks it; an unreadable library is infra_error.
static_verdict check_library(const std::string& so_path, const library_permissions& perms);

}  // namespace kforge::sandbox
