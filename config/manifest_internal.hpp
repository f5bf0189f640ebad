#pragma once
// Internal to the manifest: the two validation passes behind parse_manifest.

#include <toml++/toml.h>

#include "config/manifest.hpp"
#include "config/toml_reader.hpp"

namespace kforge::pipeline::detail {

/// Pass 1, per table: known keys, types and ranges. Fills `m` from `root`.
void read_manifest(const toml::table& root, diagnostics& d, manifest& m);

/// Pass 2, across tables (run only when pass 1 found nothing): GPU groups, processes, stage
/// coverage, endpoints (deriving the ones left out; across nodes with `derive` where it is set).
/// `root` is kept for line:column.
void check_manifest(const toml::table& root, diagnostics& d, manifest& m,
                    const cross_node_endpoint& derive);

/// Characters allowed in run and process names: they end up in paths and command lines.
bool is_plain_name(std::string_view s);

}  // namespace kforge::pipeline::detail
