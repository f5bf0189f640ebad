#include "model/safetensors.hpp"
#include "model/json_object.hpp"

#include "common/file_writer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kforge::model {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

struct dtype_info {
  st_dtype type;
  std::string_view name;
  std::size_t size;
};
constexpr dtype_info kDtypes[] = {
    {st_dtype::f64, "F64", 8},        {st_dtype::f32, "F32", 4},   {st_dtype::f16, "F16", 2},
    {st_dtype::bf16, "BF16", 2},      {st_dtype::i64, "I64", 8},   {st_dtype::i32, "I32", 4},
    {st_dtype::i16, "I16", 2},        {st_dtype::i8, "I8", 1},     {st_dtype::u8, "U8", 1},
    {st_dtype::boolean, "BOOL", 1},   {st_dtype::u16, "U16", 2},   {st_dtype::u32, "U32", 4},
    {st_dtype::u64, "U64", 8},        {st_dtype::f8_e4m3, "F8_E4M3", 1},
    {st_dtype::f8_e5m2, "F8_E5M2", 1},
};

/// A read-only view of a whole file, private and copy-on-write.
class mapping {
 public:
  mapping(void* p, std::size_t n) : p_(p), n_(n) {}
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() {
    if (p_ != nullptr && n_ > 0) munmap(p_, n_);
  }
  const std::byte* data() const noexcept { return static_cast<const std::byte*>(p_); }
  std::size_t size() const noexcept { return n_; }

 private:
  void* p_;
  std::size_t n_;
};

result<std::shared_ptr<mapping>> map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error{path + ": cannot open: " + std::strerror(errno)};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd);
    return error{path + ": cannot stat: " + why};
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* p = nullptr;
  if (size > 0) {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string why = std::strerror(errno);
      ::close(fd);
      return error{path + ": cannot map: " + why};
    }
  }
  ::close(fd);
  return std::make_shared<mapping>(p, size);
}

std::uint64_t read_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return true;
  out = a * b;
  return false;
}

}  // namespace

std::string_view st_dtype_name(st_dtype t) noexcept {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  return "?";
}

std::optional<st_dtype> parse_st_dtype(std::string_view name) noexcept {
  for (const auto& d : kDtypes)
    if (d.name == name) return d.type;
  return std::nullopt;
}

std::size_t st_dtype_size(st_dtype t) noexcept {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.size;
  return 0;
}

std::int64_t tensor_view::numel() const noexcept {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

result<safetensors_file> safetensors_file::open(const std::string& path) {
  auto mapped = map_file(path);
  if (!mapped) return mapped.err();
  std::shared_ptr<mapping> m = std::move(mapped.value());
  const std::byte* bytes = m->data();
  const std::size_t size = m->size();
  return parse(path, std::move(m), bytes, size);
}

result<safetensors_file> safetensors_file::from_bytes(std::vector<std::uint8_t> bytes, const std::string& name) {
  auto owner = std::make_shared<std::vector<std::uint8_t>>(std::move(bytes));
  const auto* data = reinterpret_cast<const std::byte*>(owner->data());
  const std::size_t size = owner->size();
  return parse(name, std::move(owner), data, size);
}

result<safetensors_file> safetensors_file::parse(const std::string& path, std::shared_ptr<const void> owner,
                                                 const std::byte* bytes, std::size_t size) {
  if (size < 8)
    return error{path + ": truncated: " + std::to_string(size) +
                 " bytes, less than the 8-byte header length"};
  const std::uint64_t header_len = read_le64(bytes);
  if (header_len > size - 8)
    return error{path + ": truncated or not safetensors: header length " + std::to_string(header_len) +
                 " runs past the end of the file (" + std::to_string(size) + " bytes)"};
  const std::string_view header(reinterpret_cast<const char*>(bytes + 8), header_len);
  auto parsed = parse_json_object(header, path, "header ");
  if (!parsed) return error{parsed.err().message};
  const json h = std::move(*parsed);

  safetensors_file f;
  f.path_ = path;
  const std::byte* data = bytes + 8 + header_len;
  const std::uint64_t data_size = size - 8 - header_len;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const std::string where = path + ": tensor '" + name + "': ";
    if (name == "__metadata__") {
      if (!it->is_object()) return error{path + ": __metadata__ is not an object"};
      for (auto mt = it->begin(); mt != it->end(); ++mt) {
        if (!mt->is_string())
          return error{path + ": __metadata__ '" + mt.key() + "' is not a string"};
        f.metadata_[mt.key()] = mt->get<std::string>();
      }
      continue;
    }
    const json& t = *it;
    if (!t.is_object()) return error{where + "entry is not an object"};
    if (!t.contains("dtype") || !t["dtype"].is_string()) return error{where + "dtype missing or not a string"};
    auto dt = parse_st_dtype(t["dtype"].get<std::string>());
    if (!dt) return error{where + "unknown dtype '" + t["dtype"].get<std::string>() + "'"};
    if (!t.contains("shape") || !t["shape"].is_array()) return error{where + "shape missing or not an array"};
    tensor_view v;
    v.name = name;
    v.dtype = *dt;
    v.file = path;
    v.owner = owner;
    std::uint64_t numel = 1;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned()) return error{where + "shape has a dimension that is not a non-negative integer"};
      const auto dim = d.get<std::uint64_t>();
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          mul_overflows(numel, dim, numel))
        return error{where + "shape overflows"};
      v.shape.push_back(static_cast<std::int64_t>(dim));
    }
    if (!t.contains("data_offsets") || !t["data_offsets"].is_array() || t["data_offsets"].size() != 2 ||
        !t["data_offsets"][0].is_number_unsigned() || !t["data_offsets"][1].is_number_unsigned())
      return error{where + "data_offsets must be two non-negative integers"};
    const auto begin = t["data_offsets"][0].get<std::uint64_t>();
    const auto end = t["data_offsets"][1].get<std::uint64_t>();
    if (begin > end) return error{where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] are reversed"};
    if (end > data_size)
      return error{where + "data_offsets end " + std::to_string(end) + " runs past the data (" +
                   std::to_string(data_size) + " bytes): file truncated?"};
    std::uint64_t want = 0;
    if (mul_overflows(numel, st_dtype_size(*dt), want) || want != end - begin)
      return error{where + "holds " + std::to_string(end - begin) + " bytes, but shape and dtype " +
                   std::string(st_dtype_name(*dt)) + " need " + std::to_string(want)};
    v.data = data + begin;
    v.nbytes = static_cast<std::size_t>(end - begin);
    ranges.emplace_back(begin, end);
    f.index_[name] = f.tensors_.size();
    f.tensors_.push_back(std::move(v));
  }
  // The format requires the data area to be covered exactly: no overlaps, no holes.
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t at = 0;
  for (const auto& [b, e] : ranges) {
    if (b < at) return error{path + ": tensor byte ranges overlap at offset " + std::to_string(b)};
    if (b > at) return error{path + ": hole in the data area at offset " + std::to_string(at)};
    at = e;
  }
  if (at != data_size)
    return error{path + ": " + std::to_string(data_size - at) + " bytes after the last tensor"};
  return f;
}

const tensor_view* safetensors_file::find(std::string_view name) const noexcept {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

result<checkpoint_tensors> checkpoint_tensors::open(const std::string& path) {
  checkpoint_tensors c;
  c.path_ = path;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    auto f = safetensors_file::open(path);
    if (!f) return f.err();
    c.files_.push_back(std::move(f.value()));
  } else {
    const fs::path dir(path);
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index, ec)) {
      std::ifstream in(index);
      if (!in) return error{index.string() + ": cannot read"};
      std::stringstream ss;
      ss << in.rdbuf();
      json j;
      try {
        j = json::parse(ss.str());
      } catch (const json::exception& e) {
        return error{index.string() + ": not valid JSON: " + e.what()};
      }
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        return error{index.string() + ": weight_map missing or not an object"};
      std::map<std::string, std::size_t> file_index;
      std::vector<std::pair<std::string, std::string>> wanted;
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it->is_string()) return error{index.string() + ": weight_map '" + it.key() + "' is not a file name"};
        const std::string shard = it->get<std::string>();
        if (shard.empty() || shard.find('/') != std::string::npos || shard == "..")
          return error{index.string() + ": weight_map '" + it.key() + "': bad shard name '" + shard + "'"};
        if (!file_index.count(shard)) {
          auto f = safetensors_file::open((dir / shard).string());
          if (!f) return f.err();
          file_index[shard] = c.files_.size();
          c.files_.push_back(std::move(f.value()));
        }
        wanted.emplace_back(it.key(), shard);
      }
      for (const auto& [name, shard] : wanted) {
        const tensor_view* v = c.files_[file_index[shard]].find(name);
        if (v == nullptr)
          return error{(dir / shard).string() + ": tensor '" + name + "' named by " + index.filename().string() +
                       " is missing"};
        c.by_name_[name] = v;
      }
      return c;
    }
    const fs::path single = dir / "model.safetensors";
    if (!fs::exists(single, ec))
      return error{path + ": neither model.safetensors.index.json nor model.safetensors found"};
    auto f = safetensors_file::open(single.string());
    if (!f) return f.err();
    c.files_.push_back(std::move(f.value()));
  }
  for (const auto& f : c.files_)
    for (const auto& t : f.tensors()) c.by_name_[t.name] = &t;
  return c;
}

checkpoint_tensors checkpoint_tensors::of(safetensors_file file) {
  checkpoint_tensors c;
  c.path_ = file.path();
  c.files_.push_back(std::move(file));
  for (const auto& t : c.files_.front().tensors()) c.by_name_[t.name] = &t;
  return c;
}

const tensor_view* checkpoint_tensors::find(std::string_view name) const noexcept {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::string> checkpoint_tensors::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [n, v] : by_name_) out.push_back(n);
  return out;
}

status write_safetensors(const std::string& path, const std::vector<tensor_bytes>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::set<std::string> seen;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::string where = path + ": tensor '" + t.name + "': ";
    if (t.name.empty() || t.name == "__metadata__") return error{where + "bad name"};
    if (!seen.insert(t.name).second) return error{where + "written twice"};
    std::uint64_t numel = 1;
    for (auto d : t.shape) {
      if (d < 0) return error{where + "negative dimension"};
      numel *= static_cast<std::uint64_t>(d);
    }
    if (numel * st_dtype_size(t.dtype) != t.nbytes)
      return error{where + std::to_string(t.nbytes) + " bytes given, shape and dtype need " +
                   std::to_string(numel * st_dtype_size(t.dtype))};
    h[t.name] = {{"dtype", std::string(st_dtype_name(t.dtype))},
                 {"shape", t.shape},
                 {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  // Whole or not at all: a temporary file renamed into place, every write and the close checked.
  // Not synced: a checkpoint syncs its files as it is committed (trainer/checkpoint.hpp), and a
  // published weights file is of no use after a crash of the host.
  auto out = file_replacement::begin(path);
  if (!out) return out.err();
  char len[8];
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  if (auto s = out->append({len, 8}); !s) return s;
  if (auto s = out->append(header); !s) return s;
  for (const auto& t : tensors)
    if (auto s = out->append({static_cast<const char*>(t.data), t.nbytes}); !s) return s;
  if (auto s = out->commit(/*sync=*/false); !s) return s;
  return status::success();
}

}  // namespace kforge::model
