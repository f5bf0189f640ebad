#include "trainer/pretrain_command.hpp"

#include <ostream>

namespace kforge::trainer {

int pretrain_command(const pretrain_options& o, std::ostream& out, std::ostream& err) {
  auto bad = [&](const std::string& message) {
    err << "kforge pretrain: " << message << "\n";
    return 2;
  };
  if (auto s = validate(o); !s) return bad(s.message());
  auto device = resolve_device(o.device);
  if (!device) return bad(device.message());
  auto fmt = load_sft_format(o.tokenizer_dir);
  if (!fmt) return bad(fmt.message());
  // --init's checkpoint is checked before the data is read (tokenizing it takes a while).
  if (auto shaped = with_init_shape(o, *fmt); !shaped) return bad(shaped.message());
  if (auto s = check_output_dir(o); !s) return bad(s.message());
  auto data = read_sft_data(o.data, *fmt, o.max_len, o.focus_from, o.focus_to, o.max_completion_tokens);
  if (!data) return bad(data.message());
  out << "pretrain: " << o.data << ": " << data->records << " records, " << data->examples.size() << " kept ("
      << data->tokens << " tokens, " << data->target_tokens << " trained on), " << data->dropped_too_long
      << " dropped as longer than --max-len " << o.max_len;
  if (data->dropped_too_long > 0) out << " (longest " << data->longest_dropped << ")";
  if (o.max_completion_tokens > 0) {
    out << ", " << data->dropped_long_completion << " as their completion is longer than --max-completion-tokens "
        << o.max_completion_tokens;
    if (data->dropped_long_completion > 0) out << " (longest " << data->longest_completion_dropped << ")";
  }
  out << "; chat format " << fmt->chat.name() << ", eos " << fmt->eos << "\n";
  if (!o.focus_from.empty())
    out << "pretrain: focus spans in " << data->focus_examples << " of " << data->examples.size() << " examples, "
        << data->focus_tokens << " tokens (weight " << o.focus_weight << ")\n";

  auto rep = run_pretrain(o, *fmt, *data, &out);
  if (!rep) {
    err << "kforge pretrain: " << rep.message() << "\n";
    return 1;
  }
  out << "pretrain: wrote " << rep->out << ": " << rep->parameters << " parameters, " << rep->steps << " steps ("
      << rep->epochs << " epochs) in " << rep->seconds << " s, " << static_cast<long long>(rep->tokens_per_second)
      << " tokens/s; loss " << rep->first_train_loss << " -> " << rep->final_train_loss;
  if (rep->final_val_loss >= 0) out << ", validation " << rep->final_val_loss;
  out << "\n";
  return 0;
}

}  // namespace kforge::trainer
