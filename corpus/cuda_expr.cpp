#include "corpus/cuda_expr.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace kforge::corpus {
namespace {

struct op_info {
  int arity;
  const char* english;
};

// Every elementwise op the writer knows, with its arity and a phrase for explanations.
const std::map<std::string, op_info>& ops() {
  static const std::map<std::string, op_info> m{
      {"relu", {1, "ReLU: max(x, 0)"}},
      {"sigmoid", {1, "sigmoid: 1/(1+exp(-x))"}},
      {"tanh", {1, "tanh via tanhf"}},
      {"exp", {1, "exp via expf"}},
      {"exp2", {1, "exp2 via exp2f"}},
      {"log", {1, "natural log via logf"}},
      {"log2", {1, "log2 via log2f"}},
      {"sqrt", {1, "sqrt via sqrtf"}},
      {"rsqrt", {1, "reciprocal square root 1/sqrtf(x)"}},
      {"abs", {1, "absolute value fabsf"}},
      {"sin", {1, "sinf"}},
      {"cos", {1, "cosf"}},
      {"tan", {1, "tanf"}},
      {"atan", {1, "atanf"}},
      {"erf", {1, "erff"}},
      {"expm1", {1, "expm1f (accurate near 0)"}},
      {"log1p", {1, "log1pf (accurate near 0)"}},
      {"neg", {1, "negation"}},
      {"reciprocal", {1, "reciprocal 1/x"}},
      {"square", {1, "square x*x"}},
      {"floor", {1, "floorf"}},
      {"ceil", {1, "ceilf"}},
      {"round", {1, "round half to even (rintf), as torch.round"}},
      {"trunc", {1, "truncf"}},
      {"sign", {1, "sign: (x>0)-(x<0)"}},
      {"silu", {1, "SiLU: x*sigmoid(x)"}},
      {"mish", {1, "Mish: x*tanh(softplus(x)) with softplus's threshold 20"}},
      {"selu", {1, "SELU: scale*(x>0 ? x : alpha*(exp(x)-1)) with PyTorch's constants"}},
      {"hardsigmoid", {1, "hard sigmoid: clamp(x+3, 0, 6)/6"}},
      {"hardswish", {1, "hard swish: x*clamp(x+3, 0, 6)/6"}},
      {"log_sigmoid", {1, "log-sigmoid in the stable form min(x,0)-log1p(exp(-|x|))"}},
      {"gelu", {1, "GELU, exact erf form: 0.5*x*(1+erf(x/sqrt(2)))"}},
      {"gelu_tanh", {1, "GELU, tanh approximation: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))"}},
      {"leaky_relu", {1, "leaky ReLU: x>0 ? x : slope*x"}},
      {"softplus", {1, "softplus: log1p(exp(beta*x))/beta, linear above the threshold"}},
      {"elu", {1, "ELU family: x>0 ? scale*x : alpha*scale*expm1(input_scale*x)"}},
      {"clamp", {1, "clamp to [lo, hi]"}},
      {"clamp_min", {1, "clamp from below"}},
      {"clamp_max", {1, "clamp from above"}},
      {"hardshrink", {1, "hard shrink: 0 inside [-lambda, lambda], x outside"}},
      {"softshrink", {1, "soft shrink: x moved toward 0 by lambda, 0 inside"}},
      {"threshold", {1, "threshold: x>th ? x : value"}},
      {"logit", {1, "logit: log(x/(1-x))"}},
      {"smooth_l1_loss", {1, "smooth L1 on the difference d: |d|<beta ? 0.5*d*d/beta : |d|-0.5*beta"}},
      {"huber_loss", {1, "Huber on the difference d: |d|<delta ? 0.5*d*d : delta*(|d|-0.5*delta)"}},
      {"logical_not", {1, "logical not"}},
      {"add", {2, "add"}},
      {"sub", {2, "subtract"}},
      {"mul", {2, "multiply"}},
      {"div", {2, "true division"}},
      {"maximum", {2, "elementwise maximum"}},
      {"minimum", {2, "elementwise minimum"}},
      {"pow", {2, "power (small integer exponents as products, else powf)"}},
      {"atan2", {2, "atan2f"}},
      {"gt", {2, "comparison >"}},
      {"lt", {2, "comparison <"}},
      {"ge", {2, "comparison >="}},
      {"le", {2, "comparison <="}},
      {"eq", {2, "comparison =="}},
      {"ne", {2, "comparison !="}},
      {"logical_and", {2, "logical and"}},
      {"logical_or", {2, "logical or"}},
      {"where", {3, "select: cond ? a : b"}},
      {"lerp", {3, "lerp in PyTorch's two-sided form (w<0.5 ? a+w*(b-a) : b-(b-a)*(1-w))"}},
  };
  return m;
}

std::string f(double v) { return float_literal(v); }

}  // namespace

std::string float_literal(double v) {
  if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
  // Beyond float's range the value is the float infinity (the cast itself would be undefined).
  if (std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max()))
    return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  // The shortest text that reads back as the same float, with the exponent as Python writes it:
  // 0.01 stays "0.01" (not "0.00999999978") and 1e-6 "1e-6" (not "1e-06"), so the constant in the
  // kernel is the one in the reference and a policy can copy it.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, static_cast<float>(v));
  std::string s(buf, r.ptr);
  if (const auto e = s.find('e'); e != std::string::npos) {
    std::size_t digits = e + 1;
    if (digits < s.size() && (s[digits] == '+' || s[digits] == '-')) ++digits;
    const bool plus = s[e + 1] == '+';
    while (digits + 1 < s.size() && s[digits] == '0') s.erase(digits, 1);
    if (plus) s.erase(e + 1, 1);
  }
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return "(" + s + "f)";
}

bool known_elementwise(const std::string& op) { return ops().count(op) > 0; }

std::vector<std::string> describe_ops(const graph& g, const std::vector<int>& nodes) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (int id : nodes) {
    const auto& n = g.nodes[static_cast<std::size_t>(id)];
    if (n.kind != node_kind::elementwise) continue;
    static const std::set<std::string> trivial{"add", "sub", "mul", "div", "neg"};
    if (trivial.count(n.op) || !seen.insert(n.op).second) continue;
    out.push_back(ops().at(n.op).english);
  }
  return out;
}

namespace {

// The float expression of op `n` over argument expressions `a` (floats; predicates already made
// floats or kept as bools where the op wants a condition: `c` holds the bool forms).
result<std::string> expression(const node& n, const std::vector<std::string>& a,
                               const std::vector<std::string>& c) {
  const auto& op = n.op;
  const auto& p = n.params;
  auto P = [&](std::size_t i) { return f(p.at(i)); };
  const std::string x = a.empty() ? "" : a[0];
  if (op == "relu") return "(" + x + " > 0.0f ? " + x + " : 0.0f)";
  if (op == "sigmoid") return "(1.0f / (1.0f + expf(-" + x + ")))";
  if (op == "tanh") return "tanhf(" + x + ")";
  if (op == "exp") return "expf(" + x + ")";
  if (op == "exp2") return "exp2f(" + x + ")";
  if (op == "log") return "logf(" + x + ")";
  if (op == "log2") return "log2f(" + x + ")";
  if (op == "sqrt") return "sqrtf(" + x + ")";
  if (op == "rsqrt") return "(1.0f / sqrtf(" + x + "))";
  if (op == "abs") return "fabsf(" + x + ")";
  if (op == "sin") return "sinf(" + x + ")";
  if (op == "cos") return "cosf(" + x + ")";
  if (op == "tan") return "tanf(" + x + ")";
  if (op == "atan") return "atanf(" + x + ")";
  if (op == "erf") return "erff(" + x + ")";
  if (op == "expm1") return "expm1f(" + x + ")";
  if (op == "log1p") return "log1pf(" + x + ")";
  if (op == "neg") return "(-" + x + ")";
  if (op == "reciprocal") return "(1.0f / " + x + ")";
  if (op == "square") return "(" + x + " * " + x + ")";
  if (op == "floor") return "floorf(" + x + ")";
  if (op == "ceil") return "ceilf(" + x + ")";
  if (op == "round") return "rintf(" + x + ")";
  if (op == "trunc") return "truncf(" + x + ")";
  if (op == "sign") return "(float)((" + x + " > 0.0f) - (" + x + " < 0.0f))";
  if (op == "silu") return "(" + x + " / (1.0f + expf(-" + x + ")))";
  if (op == "mish")
    return "(" + x + " * tanhf(" + x + " > 20.0f ? " + x + " : log1pf(expf(" + x + "))))";
  if (op == "selu")
    return "(1.05070098735548049342f * (" + x + " > 0.0f ? " + x +
           " : 1.67326324235437728482f * expm1f(" + x + ")))";
  if (op == "hardsigmoid") return "(fminf(fmaxf(" + x + " + 3.0f, 0.0f), 6.0f) / 6.0f)";
  if (op == "hardswish") return "(" + x + " * fminf(fmaxf(" + x + " + 3.0f, 0.0f), 6.0f) / 6.0f)";
  if (op == "log_sigmoid")
    return "(fminf(" + x + ", 0.0f) - log1pf(expf(-fabsf(" + x + "))))";
  if (op == "gelu") return "(0.5f * " + x + " * (1.0f + erff(" + x + " * 0.70710678118654752f)))";
  if (op == "gelu_tanh")
    return "(0.5f * " + x + " * (1.0f + tanhf(0.79788456080286536f * (" + x + " + 0.044715f * " +
           x + " * " + x + " * " + x + "))))";
  if (op == "leaky_relu") return "(" + x + " > 0.0f ? " + x + " : " + x + " * " + P(0) + ")";
  if (op == "softplus")
    return "(" + x + " * " + P(0) + " > " + P(1) + " ? " + x + " : log1pf(expf(" + x + " * " +
           P(0) + ")) / " + P(0) + ")";
  if (op == "elu")
    return "(" + x + " > 0.0f ? " + x + " * " + P(1) + " : expm1f(" + x + " * " + P(2) + ") * " +
           P(0) + " * " + P(1) + ")";
  if (op == "clamp") return "fminf(fmaxf(" + x + ", " + P(0) + "), " + P(1) + ")";
  if (op == "clamp_min") return "fmaxf(" + x + ", " + P(0) + ")";
  if (op == "clamp_max") return "fminf(" + x + ", " + P(0) + ")";
  if (op == "hardshrink")
    return "((" + x + " >= -" + P(0) + " && " + x + " <= " + P(0) + ") ? 0.0f : " + x + ")";
  if (op == "softshrink")
    return "(" + x + " > " + P(0) + " ? " + x + " - " + P(0) + " : (" + x + " < -" + P(0) +
           " ? " + x + " + " + P(0) + " : 0.0f))";
  if (op == "threshold") return "(" + x + " > " + P(0) + " ? " + x + " : " + P(1) + ")";
  if (op == "logit") return "logf(" + x + " / (1.0f - " + x + "))";
  if (op == "smooth_l1_loss")
    return "(fabsf(" + x + ") < " + P(0) + " ? 0.5f * " + x + " * " + x + " / " + P(0) +
           " : fabsf(" + x + ") - 0.5f * " + P(0) + ")";
  if (op == "huber_loss")
    return "(fabsf(" + x + ") < " + P(0) + " ? 0.5f * " + x + " * " + x + " : " + P(0) +
           " * (fabsf(" + x + ") - 0.5f * " + P(0) + "))";
  if (op == "logical_not") return "(!" + c[0] + ")";
  if (a.size() < 2) return unsupported("elementwise op " + op);
  const std::string y = a[1];
  if (op == "add") return "(" + x + " + " + y + ")";
  if (op == "sub") return "(" + x + " - " + y + ")";
  if (op == "mul") return "(" + x + " * " + y + ")";
  if (op == "div") return "(" + x + " / " + y + ")";
  if (op == "maximum") return "fmaxf(" + x + ", " + y + ")";
  if (op == "minimum") return "fminf(" + x + ", " + y + ")";
  if (op == "atan2") return "atan2f(" + x + ", " + y + ")";
  if (op == "gt") return "(" + x + " > " + y + ")";
  if (op == "lt") return "(" + x + " < " + y + ")";
  if (op == "ge") return "(" + x + " >= " + y + ")";
  if (op == "le") return "(" + x + " <= " + y + ")";
  if (op == "eq") return "(" + x + " == " + y + ")";
  if (op == "ne") return "(" + x + " != " + y + ")";
  if (op == "logical_and") return "(" + c[0] + " && " + c[1] + ")";
  if (op == "logical_or") return "(" + c[0] + " || " + c[1] + ")";
  if (op == "pow") return std::string();  // handled by the caller (needs the exponent node)
  if (a.size() < 3) return unsupported("elementwise op " + op);
  const std::string z = a[2];
  if (op == "where") return "(" + c[0] + " ? " + y + " : " + z + ")";
  if (op == "lerp")
    return "(" + z + " < 0.5f ? " + x + " + " + z + " * (" + y + " - " + x + ") : " + y + " - (" +
           y + " - " + x + ") * (1.0f - " + z + "))";
  return unsupported("elementwise op " + op);
}

}  // namespace

std::string renumber_values(const std::string& code) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::map<std::string, std::string> renamed;
  std::string out;
  out.reserve(code.size());
  for (std::size_t i = 0; i < code.size();) {
    std::size_t end = i + 1;
    if (code[i] == 'v' && (i == 0 || !ident(code[i - 1]))) {
      while (end < code.size() && std::isdigit(static_cast<unsigned char>(code[end]))) ++end;
      if (end > i + 1 && (end == code.size() || !ident(code[end]))) {
        auto [it, fresh] = renamed.try_emplace(code.substr(i, end - i));
        if (fresh) it->second = "v" + std::to_string(renamed.size());
        out += it->second;
        i = end;
        continue;
      }
      end = i + 1;
    }
    out += code[i];
    i = end;
  }
  return out;
}

result<std::string> expr_emitter::value(int id, std::string& code,
                                        const std::function<result<std::string>(int)>& leaf) {
  if (auto it = names_.find(id); it != names_.end()) return it->second;
  const auto& n = g_.nodes[static_cast<std::size_t>(id)];
  if (n.kind == node_kind::constant) {
    names_[id] = float_literal(n.value);
    return names_[id];
  }
  if (n.kind != node_kind::elementwise) {
    auto e = leaf(id);
    if (!e) return e.err();
    // A leaf that is already a variable (a per-row value) is used as is: re-declaring it under
    // its own name in an inner scope would read the uninitialized new variable.
    bool identifier = !e->empty() && !std::isdigit(static_cast<unsigned char>((*e)[0]));
    for (char ch : *e)
      identifier = identifier && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
    if (identifier) {
      names_[id] = *e;
      return *e;
    }
    const std::string name = next_name();
    code += indent_ + "const float " + name + " = " + *e + ";\n";
    names_[id] = name;
    return name;
  }
  if (!known_elementwise(n.op)) return unsupported("elementwise op " + n.op);
  std::vector<std::string> a, c;
  for (int arg : n.args) {
    auto v = value(arg, code, leaf);
    if (!v) return v.err();
    const bool is_bool = g_.nodes[static_cast<std::size_t>(arg)].is_bool;
    a.push_back(is_bool ? "(" + *v + " ? 1.0f : 0.0f)" : *v);
    c.push_back(is_bool ? *v : "(" + *v + " != 0.0f)");
  }
  std::string e;
  if (n.op == "pow") {
    const auto& ex = g_.nodes[static_cast<std::size_t>(n.args[1])];
    const auto& base = g_.nodes[static_cast<std::size_t>(n.args[0])];
    if (ex.kind == node_kind::constant && ex.value == 2.0)
      e = "(" + a[0] + " * " + a[0] + ")";
    else if (ex.kind == node_kind::constant && ex.value == 3.0)
      e = "(" + a[0] + " * " + a[0] + " * " + a[0] + ")";
    else if (ex.kind == node_kind::constant && ex.value == 0.5)
      e = "sqrtf(" + a[0] + ")";
    else if (ex.kind == node_kind::constant && ex.value == 1.0)
      e = a[0];
    else if (base.kind == node_kind::constant && base.value == 2.0)
      e = "exp2f(" + a[1] + ")";
    else
      e = "powf(" + a[0] + ", " + a[1] + ")";
  } else {
    auto ex = expression(n, a, c);
    if (!ex) return ex.err();
    e = *ex;
  }
  const std::string name = next_name();
  code += indent_ + (n.is_bool ? "const bool " : "const float ") + name + " = " + e + ";\n";
  names_[id] = name;
  return name;
}

result<std::string> expr_emitter::float_value(
    int id, std::string& code, const std::function<result<std::string>(int)>& leaf) {
  auto v = value(id, code, leaf);
  if (!v) return v;
  if (g_.nodes[static_cast<std::size_t>(id)].is_bool) return "(" + *v + " ? 1.0f : 0.0f)";
  return v;
}

}  // namespace kforge::corpus
