#include "sandbox/library_check.hpp"

#include <algorithm>
#include <optional>

#include "sandbox/diagnostics.hpp"

namespace kforge::sandbox {

namespace {

bool toolchain_init(const std::string& name) {
  return name == "frame_dummy" || name.find("__sti____cudaRegisterAll") != std::string::npos;
}
bool toolchain_fini(const std::string& name) { return name == "__do_global_dtors_aux"; }

std::string load_time_what(const std::string& name, bool init) {
  if (name.rfind("_GLOBAL__sub_I_", 0) == 0)
    return "a static initialiser (a namespace-scope object initialised by running code)";
  if (name.rfind("_GLOBAL__sub_D_", 0) == 0) return "a static destructor";
  return std::string(init ? "load" : "unload") + "-time function `" + demangle(name) + "`";
}

bool is_weak(const elf_summary& elf, const std::string& sym) {
  return std::find(elf.weak_imported.begin(), elf.weak_imported.end(), sym) !=
         elf.weak_imported.end();
}

// Why an import breaks a rule, if it does: a name a deny list knows gets its rule (the reason
// a candidate learns from); any other name must be on the allowlist.
std::optional<finding> import_finding(const std::string& sym, bool weak,
                                      const library_permissions& perms) {
  const std::string name = "`" + demangle(sym.substr(0, sym.find('@'))) + "`";
  if (auto r = forbidden_import(sym, perms))
    return finding{*r, 0, "the library calls " + name, false};
  if (import_allowed(sym, perms, weak)) return std::nullopt;
  return finding{rule::import_not_allowed, 0,
                 weak ? "the library imports " + name +
                            " weakly (bound at load time to whatever defines it)"
                      : "the library imports " + name + ", which is not on the import allowlist",
                 false};
}

}  // namespace

static_verdict check_library(const elf_summary& elf, const library_permissions& perms) {
  std::vector<finding> found;
  for (const auto& sym : elf.imported)
    if (auto f = import_finding(sym, is_weak(elf, sym), perms)) found.push_back(std::move(*f));
  // The reason is the first finding: a deny list's rule says more than "not on the allowlist".
  std::stable_partition(found.begin(), found.end(),
                        [](const finding& f) { return f.why != rule::import_not_allowed; });
  for (const auto& f : elf.init_functions)
    if (!toolchain_init(f))
      found.push_back({rule::load_time_code, 0, load_time_what(f, true), false});
  for (const auto& f : elf.fini_functions)
    if (!toolchain_fini(f))
      found.push_back({rule::load_time_code, 0, load_time_what(f, false), false});

  static_verdict v;
  if (!found.empty()) {
    v.status = static_status::rejected;
    v.reason = "rejected by " + describe(found.front());
    if (found.size() > 1) v.reason += " (and " + std::to_string(found.size() - 1) + " more)";
  } else if (std::find(elf.exported_functions.begin(), elf.exported_functions.end(),
                       "kf_forward") == elf.exported_functions.end()) {
    found.push_back({rule::missing_entry_point, 0,
                     "the library does not export kf_forward (is the signature exactly the ABI's, "
                     "with extern \"C\"?)",
                     false});
    v.status = static_status::link_error;
    v.reason = describe(found.front());
  }
  v.findings = std::move(found);
  return v;
}

static_verdict check_library(const std::string& so_path, const library_permissions& perms) {
  auto elf = read_elf_summary(so_path);
  if (!elf) {
    static_verdict v;
    v.status = static_status::infra_error;
    v.reason = "library check: " + elf.message();
    return v;
  }
  return check_library(*elf, perms);
}

}  // namespace kforge::sandbox
