#pragma once
// The safetensors format, without LibTorch: an 8-byte little-endian header length, a JSON header
// naming every tensor's dtype, shape and byte range, then the bytes. Files are memory-mapped
// (private, copy-on-write, so a view may be handed to code that writes) and every offset is checked
// against the file before a view is made. A checkpoint directory holds either one
// `model.safetensors` or shards listed by `model.safetensors.index.json`.
//
// Errors name the file and, where there is one, the tensor: "model.safetensors: tensor 'x': ...".

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace kforge::model {

/// Element types of the format (the names are the header's "dtype" strings, e.g. "BF16").
enum class st_dtype : std::uint8_t { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean, u16, u32, u64, f8_e4m3, f8_e5m2 };

std::string_view st_dtype_name(st_dtype t) noexcept;
std::optional<st_dtype> parse_st_dtype(std::string_view name) noexcept;
std::size_t st_dtype_size(st_dtype t) noexcept;

/// One tensor of a mapped file. The bytes stay valid while `owner` (the mapping) lives; a view
/// copied out of its file keeps the mapping alive.
struct tensor_view {
  std::string name;
  st_dtype dtype = st_dtype::f32;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;  ///< may be unaligned when the writer did not pad the header
  std::size_t nbytes = 0;
  std::string file;                    ///< the file it came from, for error messages
  std::shared_ptr<const void> owner;   ///< the mapping

  std::int64_t numel() const noexcept;
};

/// A mapped, validated safetensors file.
class safetensors_file {
 public:
  /// Maps and validates `path`: header length within the file, JSON header, known dtypes,
  /// data_offsets inside the data area, sizes equal to numel * element size, no overlaps or holes.
  [[nodiscard]] static result<safetensors_file> open(const std::string& path);
  /// The same checks on a file's bytes held in memory (e.g. weights sent inline in a message);
  /// `name` stands for the path in errors.
  [[nodiscard]] static result<safetensors_file> from_bytes(std::vector<std::uint8_t> bytes, const std::string& name);

  const std::string& path() const noexcept { return path_; }
  const std::vector<tensor_view>& tensors() const noexcept { return tensors_; }
  /// nullptr when absent.
  const tensor_view* find(std::string_view name) const noexcept;
  /// The header's "__metadata__" (string to string), empty when absent.
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

 private:
  [[nodiscard]] static result<safetensors_file> parse(const std::string& path, std::shared_ptr<const void> owner,
                                                      const std::byte* bytes, std::size_t size);

  std::string path_;
  std::vector<tensor_view> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

/// The tensors of a checkpoint directory (or of one .safetensors file given directly).
class checkpoint_tensors {
 public:
  // Move-only: the name index points into the files' tensor lists.
  checkpoint_tensors() = default;
  checkpoint_tensors(checkpoint_tensors&&) = default;
  checkpoint_tensors& operator=(checkpoint_tensors&&) = default;
  checkpoint_tensors(const checkpoint_tensors&) = delete;
  checkpoint_tensors& operator=(const checkpoint_tensors&) = delete;

  /// `path` is a directory with model.safetensors.index.json (sharded: every tensor the index names
  /// must be in the shard it names) or model.safetensors, or a .safetensors file.
  [[nodiscard]] static result<checkpoint_tensors> open(const std::string& path);
  /// One already opened file.
  static checkpoint_tensors of(safetensors_file file);

  /// nullptr when absent.
  const tensor_view* find(std::string_view name) const noexcept;
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  std::vector<safetensors_file> files_;
  std::map<std::string, const tensor_view*, std::less<>> by_name_;
};

/// A tensor to write: contiguous bytes in the given dtype and shape.
struct tensor_bytes {
  std::string name;
  st_dtype dtype = st_dtype::f32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t nbytes = 0;
};

/// Writes a safetensors file (header padded to 8 bytes, tensors in the given order), through a
/// temporary file renamed into place. Names must be unique; nbytes must match shape and dtype.
[[nodiscard]] status write_safetensors(const std::string& path, const std::vector<tensor_bytes>& tensors,
                                       const std::map<std::string, std::string>& metadata = {});

}  // namespace kforge::model
