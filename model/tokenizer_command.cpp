#include "model/tokenizer_command.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/chat.hpp"
#include "model/tokenizer.hpp"

namespace kforge::model {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// The written directory as a checkpoint reader sees it: our loader, the generation defaults and the
// chat format. A failure here is a bug in the writer, not in the input.
status read_back(const std::string& dir, const bpe_model& model) {
  auto tok = tokenizer::load(dir);
  if (!tok) return tok.err();
  if (tok->vocab_size() != model.vocab_size())
    return error{dir + ": read back with " + std::to_string(tok->vocab_size()) + " tokens, wrote " +
                 std::to_string(model.vocab_size())};
  auto defaults = load_generation_defaults(dir, *tok);
  if (!defaults) return defaults.err();
  auto chat = detect_chat_format(defaults->chat_template, *tok, defaults->bos_token, dir + "/tokenizer_config.json");
  if (!chat) return chat.err();
  return {};
}

}  // namespace

status add_jsonl_texts(const std::string& file, const std::vector<std::string>& fields, bpe_trainer& trainer) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return error{file + ": cannot read"};
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    const std::string where = file + ":" + std::to_string(n);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      // nlohmann quotes all it read of the bad value, which can be a whole kernel: keep the start.
      std::string why = e.what();
      if (why.size() > 200) why = why.substr(0, 200) + "...";
      return error{where + ": not valid JSON: " + why};
    }
    if (!j.is_object()) return error{where + ": not a JSON object"};
    for (const auto& f : fields) {
      auto it = j.find(f);
      if (it == j.end()) return error{where + ": no field '" + f + "'"};
      if (!it->is_string()) return error{where + ": field '" + f + "' is not a string"};
      trainer.add_text(it->get_ref<const std::string&>());
    }
  }
  if (in.bad()) return error{file + ": read error"};
  return {};
}

int tokenizer_train_command(const tokenizer_train_options& opt, std::ostream& out, std::ostream& err) {
  const char* const cmd = "kforge tokenizer train: ";
  if (opt.inputs.empty()) {
    err << cmd << "needs at least one --input FILE.jsonl\n";
    return 2;
  }
  if (opt.fields.empty()) {
    err << cmd << "needs --field NAME[,NAME...]\n";
    return 2;
  }
  if (opt.out.empty()) {
    err << cmd << "needs --out DIR\n";
    return 2;
  }
  for (const auto& f : opt.inputs) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f, ec)) {
      err << cmd << f << ": no such file\n";
      return 2;
    }
  }
  bpe_trainer_options topt;
  topt.vocab_size = opt.vocab_size;
  topt.min_frequency = opt.min_frequency;
  auto trainer = bpe_trainer::create(topt);
  if (!trainer) {
    err << cmd << "--vocab/--min-frequency: " << trainer.message() << "\n";
    return 2;
  }

  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& f : opt.inputs) {
    if (auto s = add_jsonl_texts(f, opt.fields, *trainer); !s) {
      err << cmd << s.message() << "\n";
      return 2;
    }
  }
  const double read_s = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  bpe_stats stats;
  const bpe_model model = trainer->train(&stats);
  const double train_s = seconds_since(t1);
  if (stats.texts == 0) {
    err << cmd << "the input holds no records\n";
    return 2;
  }

  if (auto s = write_tokenizer_files(model, opt.out); !s) {
    err << cmd << s.message() << "\n";
    return 1;
  }
  if (auto s = read_back(opt.out, model); !s) {
    err << cmd << "the written tokenizer does not read back: " << s.message() << "\n";
    return 1;
  }

  const auto merges = static_cast<std::int64_t>(model.merges.size());
  const auto specials = static_cast<std::int64_t>(model.special_tokens.size());
  out << "input: " << stats.texts << " texts (fields " << join(opt.fields, ",") << ") from " << opt.inputs.size()
      << " file(s), " << fixed(static_cast<double>(stats.bytes) / 1e6, 2) << " MB, " << stats.pre_tokens
      << " pre-tokens, " << stats.unique_words << " unique\n";
  out << "vocab: " << model.vocab_size() << " (256 bytes + " << (static_cast<std::int64_t>(model.tokens.size()) - 256)
      << " merged + " << specials << " special), " << merges << " merges";
  if (model.vocab_size() < opt.vocab_size)
    out << "; stopped short of " << opt.vocab_size << ": no pair left seen " << opt.min_frequency << " times";
  out << "\n";
  out << "compression: " << fixed(stats.bytes_per_token(), 3) << " bytes/token on the input (" << stats.tokens
      << " tokens)\n";
  out << "time: " << fixed(read_s, 2) << " s reading + pre-tokenizing, " << fixed(train_s, 2) << " s merging, "
      << fixed(read_s + train_s, 2) << " s total\n";
  out << "wrote " << opt.out << "/tokenizer.json and " << opt.out << "/tokenizer_config.json\n";
  return 0;
}

}  // namespace kforge::model
