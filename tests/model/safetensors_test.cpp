#include "model/safetensors.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "tests/model/test_files.hpp"

using namespace kforge::model;
using namespace kforge::model::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

}  // namespace

TEST_CASE("safetensors: reads the fixture written by transformers") {
  auto f = safetensors_file::open(fixtures("qwen2/model.safetensors"));
  REQUIRE_MESSAGE(f.ok(), (f.ok() ? "" : f.message()));
  const tensor_view* emb = f->find("model.embed_tokens.weight");
  REQUIRE(emb != nullptr);
  CHECK(emb->dtype == st_dtype::f32);
  CHECK(emb->shape == std::vector<std::int64_t>{512, 64});
  CHECK(emb->nbytes == 512 * 64 * 4);
  CHECK(f->find("lm_head.weight") == nullptr);  // tied: transformers does not save it
  CHECK(f->find("nope") == nullptr);

  auto logits = safetensors_file::open(fixtures("qwen2_logits.safetensors"));
  REQUIRE(logits.ok());
  const tensor_view* ids = logits->find("input_ids");
  REQUIRE(ids != nullptr);
  CHECK(ids->dtype == st_dtype::i64);
  CHECK(ids->shape == std::vector<std::int64_t>{2, 19});
}

TEST_CASE("safetensors: a sharded checkpoint through its index") {
  auto c = checkpoint_tensors::open(fixtures("llama"));
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.message()));
  CHECK(c->find("lm_head.weight") != nullptr);
  CHECK(c->find("model.layers.1.mlp.down_proj.weight") != nullptr);
  CHECK(c->names().size() == 2 + 2 * 9 + 1);  // embed, lm_head, 9 per layer, norm

  auto single = checkpoint_tensors::open(fixtures("qwen2"));
  REQUIRE(single.ok());
  CHECK(single->find("model.norm.weight") != nullptr);
}

TEST_CASE("safetensors: write then read back, every dtype size") {
  scratch_dir dir;
  std::vector<float> a{1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
  std::vector<std::int64_t> b{-1, 7};
  std::vector<std::uint16_t> c{0x3f80, 0x4000, 0x4040};  // bf16 1, 2, 3
  const std::string path = dir.path("t.safetensors");
  REQUIRE(write_safetensors(path,
                            {{"a", st_dtype::f32, {2, 3}, a.data(), a.size() * 4},
                             {"b", st_dtype::i64, {2}, b.data(), b.size() * 8},
                             {"c", st_dtype::bf16, {3}, c.data(), c.size() * 2},
                             {"empty", st_dtype::f16, {0, 4}, nullptr, 0}},
                            {{"format", "pt"}})
              .ok());
  auto f = safetensors_file::open(path);
  REQUIRE_MESSAGE(f.ok(), (f.ok() ? "" : f.message()));
  CHECK(f->metadata().at("format") == "pt");
  REQUIRE(f->find("a") != nullptr);
  CHECK(std::memcmp(f->find("a")->data, a.data(), 24) == 0);
  CHECK(std::memcmp(f->find("b")->data, b.data(), 16) == 0);
  CHECK(f->find("c")->dtype == st_dtype::bf16);
  CHECK(std::memcmp(f->find("c")->data, c.data(), 6) == 0);
  CHECK(f->find("empty")->numel() == 0);
  // The data area starts 8-byte aligned.
  CHECK(reinterpret_cast<std::uintptr_t>(f->find("a")->data) % 8 == 0);

  auto dup = write_safetensors(dir.path("d.safetensors"), {{"x", st_dtype::f32, {1}, a.data(), 4},
                                                           {"x", st_dtype::f32, {1}, a.data(), 4}});
  CHECK_FALSE(dup.ok());
  auto wrong = write_safetensors(dir.path("w.safetensors"), {{"x", st_dtype::f32, {2}, a.data(), 4}});
  REQUIRE_FALSE(wrong.ok());
  CHECK(contains(wrong.message(), "tensor 'x'"));
}

TEST_CASE("safetensors: bad files give errors naming file and tensor") {
  scratch_dir dir;
  auto open_raw = [&](const std::string& bytes) {
    write_text(dir.path("bad.safetensors"), bytes);
    return safetensors_file::open(dir.path("bad.safetensors"));
  };

  auto missing = safetensors_file::open(dir.path("absent.safetensors"));
  REQUIRE_FALSE(missing.ok());
  CHECK(contains(missing.message(), "absent.safetensors"));

  auto tiny = open_raw("abc");
  REQUIRE_FALSE(tiny.ok());
  CHECK(contains(tiny.message(), "truncated"));

  auto long_header = open_raw(raw_file("{}", "").substr(0, 8) + "{");  // claims 2 bytes, has 1
  REQUIRE_FALSE(long_header.ok());
  CHECK(contains(long_header.message(), "truncated"));

  auto bad_json = open_raw(raw_file("{\"a\": [", ""));
  REQUIRE_FALSE(bad_json.ok());
  CHECK(contains(bad_json.message(), "not valid JSON"));
  CHECK(contains(bad_json.message(), "bad.safetensors"));

  auto bad_dtype = open_raw(raw_file(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "abcd"));
  REQUIRE_FALSE(bad_dtype.ok());
  CHECK(contains(bad_dtype.message(), "tensor 'w'"));
  CHECK(contains(bad_dtype.message(), "F33"));

  auto short_data = open_raw(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd"));
  REQUIRE_FALSE(short_data.ok());
  CHECK(contains(short_data.message(), "tensor 'w'"));
  CHECK(contains(short_data.message(), "truncated"));

  auto wrong_size = open_raw(raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "abcdefgh"));
  REQUIRE_FALSE(wrong_size.ok());
  CHECK(contains(wrong_size.message(), "need 12"));

  auto overlap = open_raw(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                   R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                                   "abcdef"));
  REQUIRE_FALSE(overlap.ok());
  CHECK(contains(overlap.message(), "overlap"));

  auto hole = open_raw(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "abcdefgh"));
  REQUIRE_FALSE(hole.ok());
  CHECK(contains(hole.message(), "hole"));

  // A real file cut short: the last tensor's bytes are gone.
  const std::string full = read_text(fixtures("qwen2/model.safetensors"));
  auto cut = open_raw(full.substr(0, full.size() - 100));
  REQUIRE_FALSE(cut.ok());
  CHECK(contains(cut.message(), "truncated"));
  CHECK(contains(cut.message(), "tensor '"));
}

TEST_CASE("safetensors: a file's bytes in memory read as the file does, with the same checks") {
  const std::string text = read_text(fixtures("qwen2/model.safetensors"));
  auto mem = safetensors_file::from_bytes(std::vector<std::uint8_t>(text.begin(), text.end()), "<inline>");
  REQUIRE_MESSAGE(mem.ok(), (mem.ok() ? "" : mem.message()));
  auto file = safetensors_file::open(fixtures("qwen2/model.safetensors"));
  REQUIRE(file.ok());
  REQUIRE(mem->tensors().size() == file->tensors().size());
  for (const auto& t : file->tensors()) {
    const tensor_view* m = mem->find(t.name);
    REQUIRE(m != nullptr);
    CHECK(m->shape == t.shape);
    CHECK(m->nbytes == t.nbytes);
    CHECK(std::memcmp(m->data, t.data, t.nbytes) == 0);
  }
  // As one checkpoint: found by name, and the path is the given name.
  const checkpoint_tensors c = checkpoint_tensors::of(std::move(mem).value());
  CHECK(c.path() == "<inline>");
  CHECK(c.find("model.embed_tokens.weight") != nullptr);
  CHECK(c.names().size() == file->tensors().size());

  const auto half = static_cast<std::ptrdiff_t>(text.size() / 2);
  auto cut = safetensors_file::from_bytes(std::vector<std::uint8_t>(text.begin(), text.begin() + half), "<cut>");
  REQUIRE_FALSE(cut.ok());
  CHECK(contains(cut.message(), "<cut>: "));
  CHECK(contains(cut.message(), "truncated"));
  CHECK_FALSE(safetensors_file::from_bytes({}, "<empty>").ok());
}

TEST_CASE("safetensors: sharded index errors") {
  scratch_dir dir;
  namespace fs = std::filesystem;
  for (const auto& e : fs::directory_iterator(fixtures("llama"))) fs::copy(e.path(), dir.path(e.path().filename().string()));
  write_text(dir.path("model.safetensors.index.json"),
             R"({"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors"}})");
  auto wrong_shard = checkpoint_tensors::open(dir.path());
  REQUIRE_FALSE(wrong_shard.ok());
  CHECK(contains(wrong_shard.message(), "'lm_head.weight'"));
  CHECK(contains(wrong_shard.message(), "model-00001-of-00002.safetensors"));

  write_text(dir.path("model.safetensors.index.json"), R"({"weight_map": {"x": "gone.safetensors"}})");
  auto gone = checkpoint_tensors::open(dir.path());
  REQUIRE_FALSE(gone.ok());
  CHECK(contains(gone.message(), "gone.safetensors"));

  write_text(dir.path("model.safetensors.index.json"), "{\"weight_map\": ");
  auto bad = checkpoint_tensors::open(dir.path());
  REQUIRE_FALSE(bad.ok());
  CHECK(contains(bad.message(), "model.safetensors.index.json"));

  scratch_dir empty;
  auto none = checkpoint_tensors::open(empty.path());
  REQUIRE_FALSE(none.ok());
  CHECK(contains(none.message(), "model.safetensors"));
}
