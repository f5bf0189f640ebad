#include "sandbox/evaluator.hpp"

#include <filesystem>

#include "sandbox/static_check.hpp"
#include "sandbox/verdict_encoding.hpp"

namespace kforge::sandbox {

result<evaluator> evaluator::create(evaluator_options options) {
  if (!valid_arch(options.compile.arch))
    return error{"arch '" + options.compile.arch + "': expected sm_NN or compute_NN (e.g. sm_90a), one target"};
  auto tc = find_toolchain();
  if (!tc) return error{tc.err().message};
  return evaluator(std::move(*tc), std::move(options));
}

result<std::string> evaluator::probe_library(const std::string& dir) const {
  compile_options o = options_.compile;
  if (o.cache_dir.empty()) o.scratch_root = dir;
  auto r = compile(tools_, known_good_candidate(), o);
  if (!r.ok()) return error{"the known-good probe kernel did not build: " + r.reason + "\n" + r.log};
  if (o.cache_dir.empty()) {
    // Without a cache the library lives in a directory owned by the result: keep a copy.
    const std::string path = dir + "/probe.so";
    std::error_code ec;
    std::filesystem::copy_file(r.library, path, std::filesystem::copy_options::overwrite_existing,
                               ec);
    if (ec) return error{"cannot copy the probe library to " + path + ": " + ec.message()};
    return path;
  }
  return r.library;
}

wire::VerdictT evaluator::evaluate(const tasks::task& t, std::string_view source,
                                   const run_stage& run) const {
  wire::VerdictT v;
  library_permissions libs;
  libs.cublas = t.allow_cublas;

  check_options check;
  check.libraries = libs;
  check.arch = options_.compile.arch;
  check.scratch_root = options_.compile.scratch_root;
  check.preprocess_time_limit = options_.preprocess_time_limit;
  if (options_.preprocess_check) check.preprocess_with = &tools_;
  if (options_.static_checks) {
    const auto sv = check_source(source, check);
    if (!sv.ok()) {
      encode_static(sv, v);
      return v;
    }
  }
  compile_options co = options_.compile;
  co.libraries = libs;
  co.check_library = options_.static_checks;
  const auto cr = compile(tools_, source, co);
  encode_compile(cr, v);
  if (!cr.ok()) return v;
  if (!run) {
    v.status = wire::VerdictStatus::compiled;
    v.reason = "compiled; not run (no GPU: compile-only mode)";
    return v;
  }
  encode_run(run(t, cr.library), v);
  return v;
}

}  // namespace kforge::sandbox
