#include "tasks/task_parser.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>

namespace kforge::tasks {
namespace {

using json = nlohmann::json;

// Thrown inside this file only; parse_task turns it into an error naming the field.
struct bad_field {
  std::string field;
  std::string reason;
};

[[noreturn]] void fail(std::string field, std::string reason) {
  throw bad_field{std::move(field), std::move(reason)};
}

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string indexed(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::string type_of(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  return v.type_name();
}

void expect_object(const json& v, const std::string& field) {
  if (!v.is_object()) fail(field, "must be an object, got " + type_of(v));
}

// Unknown keys are checked before missing ones: a misspelled key reads better as "unknown key"
// than as a missing field.
void only_keys(const json& obj, const std::string& path,
               std::initializer_list<const char*> allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::find_if(allowed.begin(), allowed.end(),
                     [&](const char* k) { return it.key() == k; }) != allowed.end())
      continue;
    std::string list;
    for (const char* k : allowed) list += (list.empty() ? "" : ", ") + std::string(k);
    fail(join(path, it.key()), "unknown key (expected one of: " + list + ")");
  }
}

const json& need(const json& obj, const std::string& path, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(join(path, key), "required field is missing");
  return *it;
}

const json* maybe(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string get_string(const json& v, const std::string& field) {
  if (!v.is_string()) fail(field, "must be a string, got " + type_of(v));
  return v.get<std::string>();
}

double get_number(const json& v, const std::string& field) {
  if (!v.is_number()) fail(field, "must be a number, got " + type_of(v));
  return v.get<double>();
}

bool get_bool(const json& v, const std::string& field) {
  if (!v.is_boolean()) fail(field, "must be true or false, got " + type_of(v));
  return v.get<bool>();
}

std::int64_t get_int(const json& v, const std::string& field) {
  if (!v.is_number_integer()) fail(field, "must be an integer, got " + type_of(v));
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX) fail(field, "is too large");
  return v.get<std::int64_t>();
}

const json& get_array(const json& v, const std::string& field) {
  if (!v.is_array()) fail(field, "must be an array, got " + type_of(v));
  return v;
}

shape get_shape(const json& v, const std::string& field) {
  shape s;
  const auto& a = get_array(v, field);
  for (std::size_t i = 0; i < a.size(); ++i) s.push_back(get_int(a[i], indexed(field, i)));
  return s;
}

dtype get_dtype(const json& v, const std::string& field) {
  const auto s = get_string(v, field);
  auto t = parse_dtype(s);
  if (!t) fail(field, "unknown dtype '" + s + "' (expected " + dtype_names() + ")");
  return *t;
}

init_spec get_init(const json& v, const std::string& path) {
  expect_object(v, path);
  init_spec init;
  const auto d = get_string(need(v, path, "dist"), join(path, "dist"));
  auto dist = parse_distribution(d);
  if (!dist)
    fail(join(path, "dist"),
         "unknown distribution '" + d + "' (expected " + distribution_names() + ")");
  init.dist = *dist;
  // Each distribution takes exactly its own parameters, all required: a stray "std" on a uniform
  // input is a mistake worth reporting, and no parameter silently takes a default.
  switch (init.dist) {
    case distribution::normal:
      only_keys(v, path, {"dist", "mean", "std"});
      init.mean = get_number(need(v, path, "mean"), join(path, "mean"));
      init.std = get_number(need(v, path, "std"), join(path, "std"));
      break;
    case distribution::uniform:
    case distribution::randint:
      only_keys(v, path, {"dist", "low", "high"});
      init.low = get_number(need(v, path, "low"), join(path, "low"));
      init.high = get_number(need(v, path, "high"), join(path, "high"));
      break;
    case distribution::constant:
      only_keys(v, path, {"dist", "value"});
      init.value = get_number(need(v, path, "value"), join(path, "value"));
      break;
  }
  return init;
}

// What a tensor of the task is: a draw (drawn from its init, for prepare), an input drawn from its
// init (a task without prepare), or an input prepare computes (no init). Inputs alone have a role.
enum class tensor_kind { draw, drawn_input, prepared_input };

input_spec get_input(const json& v, const std::string& path, tensor_kind kind) {
  expect_object(v, path);
  switch (kind) {
    case tensor_kind::draw: only_keys(v, path, {"name", "shape", "dtype", "init"}); break;
    case tensor_kind::drawn_input: only_keys(v, path, {"name", "shape", "dtype", "init", "role"}); break;
    case tensor_kind::prepared_input:
      if (v.contains("init"))
        fail(join(path, "init"), "not allowed: prepare computes this input from the draws");
      only_keys(v, path, {"name", "shape", "dtype", "role"});
      break;
  }
  input_spec in;
  in.name = get_string(need(v, path, "name"), join(path, "name"));
  in.shape = get_shape(need(v, path, "shape"), join(path, "shape"));
  in.type = get_dtype(need(v, path, "dtype"), join(path, "dtype"));
  if (kind != tensor_kind::prepared_input) in.init = get_init(need(v, path, "init"), join(path, "init"));
  if (const json* r = maybe(v, "role")) {
    auto role = get_string(*r, join(path, "role"));
    if (role != "input" && role != "parameter")
      fail(join(path, "role"), "unknown role '" + role + "' (expected input, parameter)");
    in.parameter = role == "parameter";
  }
  return in;
}

output_spec get_output(const json& v, const std::string& path) {
  expect_object(v, path);
  only_keys(v, path, {"name", "shape", "dtype"});
  output_spec out;
  out.name = get_string(need(v, path, "name"), join(path, "name"));
  out.shape = get_shape(need(v, path, "shape"), join(path, "shape"));
  out.type = get_dtype(need(v, path, "dtype"), join(path, "dtype"));
  return out;
}

task get_task(const json& v) {
  expect_object(v, "task");
  only_keys(v, "",
            {"id", "category", "description", "inputs", "outputs", "reference", "tolerance",
             "variants", "allow_cublas", "provenance", "draws", "prepare"});
  task t;
  t.id = get_string(need(v, "", "id"), "id");
  if (t.id.empty()) fail("id", "must not be empty");
  const auto c = get_string(need(v, "", "category"), "category");
  auto cat = parse_category(c);
  if (!cat) fail("category", "unknown category '" + c + "' (expected " + category_names() + ")");
  t.category = *cat;
  t.description = get_string(need(v, "", "description"), "description");

  if (const json* p = maybe(v, "prepare")) t.prepare = get_string(*p, "prepare");
  if (const json* p = maybe(v, "prepare"); p && t.prepare.empty())
    fail("prepare", "must not be empty");
  if (const json* d = maybe(v, "draws")) {
    get_array(*d, "draws");
    for (std::size_t i = 0; i < d->size(); ++i)
      t.draws.push_back(get_input((*d)[i], indexed("draws", i), tensor_kind::draw));
  }
  const auto& inputs = get_array(need(v, "", "inputs"), "inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    t.inputs.push_back(get_input(inputs[i], indexed("inputs", i),
                                 t.prepare.empty() ? tensor_kind::drawn_input : tensor_kind::prepared_input));
  const auto& outputs = get_array(need(v, "", "outputs"), "outputs");
  for (std::size_t i = 0; i < outputs.size(); ++i)
    t.outputs.push_back(get_output(outputs[i], indexed("outputs", i)));

  t.reference = get_string(need(v, "", "reference"), "reference");

  if (const json* tol = maybe(v, "tolerance")) {
    expect_object(*tol, "tolerance");
    only_keys(*tol, "tolerance", {"atol", "rtol"});
    t.tolerance.atol = get_number(need(*tol, "tolerance", "atol"), "tolerance.atol");
    t.tolerance.rtol = get_number(need(*tol, "tolerance", "rtol"), "tolerance.rtol");
  } else {
    t.tolerance = default_tolerance(t.outputs);
  }

  if (const json* vars = maybe(v, "variants")) {
    get_array(*vars, "variants");
    for (std::size_t i = 0; i < vars->size(); ++i) {
      const auto& obj = (*vars)[i];
      const auto path = indexed("variants", i);
      expect_object(obj, path);
      variant var;
      for (auto it = obj.begin(); it != obj.end(); ++it)
        var.shapes[it.key()] = get_shape(it.value(), join(path, it.key()));
      t.variants.push_back(std::move(var));
    }
  }
  if (const json* c = maybe(v, "allow_cublas")) t.allow_cublas = get_bool(*c, "allow_cublas");
  if (const json* p = maybe(v, "provenance")) t.provenance = get_string(*p, "provenance");

  if (auto s = check_task(t); !s) throw s.err();
  return t;
}

// nlohmann keeps the last of two equal keys without a word; a task file with a key given twice is
// almost always a merge or copy-paste mistake, so the parse callback reports it.
json parse_json(std::string_view text) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto cb = [&](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start: keys.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      default: break;
    }
    return true;
  };
  json v = json::parse(text.begin(), text.end(), cb);
  if (!duplicate.empty()) fail(duplicate, "key given twice in one object");
  return v;
}

// Keys in the documented order (ordered_json), every field written out.
nlohmann::ordered_json to_json(const task& t) {
  using ojson = nlohmann::ordered_json;
  auto shape_json = [](const shape& s) {
    ojson a = ojson::array();
    for (auto d : s) a.push_back(d);
    return a;
  };
  ojson j;
  j["id"] = t.id;
  j["category"] = std::string(to_string(t.category));
  j["description"] = t.description;
  auto init_json = [](const input_spec& in) {
    ojson init;
    init["dist"] = std::string(to_string(in.init.dist));
    switch (in.init.dist) {
      case distribution::normal:
        init["mean"] = in.init.mean;
        init["std"] = in.init.std;
        break;
      case distribution::uniform:
        init["low"] = in.init.low;
        init["high"] = in.init.high;
        break;
      case distribution::randint:
        init["low"] = static_cast<std::int64_t>(in.init.low);
        init["high"] = static_cast<std::int64_t>(in.init.high);
        break;
      case distribution::constant: init["value"] = in.init.value; break;
    }
    return init;
  };
  auto tensor_json = [&](const input_spec& in, bool drawn) {
    ojson o = {{"name", in.name},
               {"shape", shape_json(in.shape)},
               {"dtype", std::string(to_string(in.type))}};
    if (drawn) o["init"] = init_json(in);
    if (in.parameter) o["role"] = "parameter";
    return o;
  };
  if (!t.prepare.empty()) {
    j["draws"] = ojson::array();
    for (const auto& d : t.draws) j["draws"].push_back(tensor_json(d, true));
    j["prepare"] = t.prepare;
  }
  j["inputs"] = ojson::array();
  for (const auto& in : t.inputs) j["inputs"].push_back(tensor_json(in, t.prepare.empty()));
  j["outputs"] = ojson::array();
  for (const auto& out : t.outputs)
    j["outputs"].push_back({{"name", out.name},
                            {"shape", shape_json(out.shape)},
                            {"dtype", std::string(to_string(out.type))}});
  j["reference"] = t.reference;
  j["tolerance"] = {{"atol", t.tolerance.atol}, {"rtol", t.tolerance.rtol}};
  j["variants"] = ojson::array();
  for (const auto& v : t.variants) {
    ojson o = ojson::object();
    // Variant keys in input order, as a person would write them.
    for (const auto& in : t.inputs)
      if (auto it = v.shapes.find(in.name); it != v.shapes.end())
        o[in.name] = shape_json(it->second);
    j["variants"].push_back(o);
  }
  j["allow_cublas"] = t.allow_cublas;
  if (!t.provenance.empty()) j["provenance"] = t.provenance;
  return j;
}

}  // namespace

result<task> parse_task(std::string_view json_text, const std::string& where) {
  try {
    return get_task(parse_json(json_text));
  } catch (const bad_field& b) {
    return error{where + ": " + b.field + ": " + b.reason};
  } catch (const error& e) {
    return error{where + ": " + e.message};
  } catch (const json::parse_error& e) {
    return error{where + ": invalid JSON: " + e.what()};
  } catch (const std::exception& e) {
    return error{where + ": " + e.what()};
  }
}

void task_set_reader::add(std::string_view text, const std::string& file, int line) {
  const std::string where = line > 0 ? file + ":" + std::to_string(line) : file;
  auto t = parse_task(text, where);
  if (!t) {
    errors_.push_back(t.err());
    return;
  }
  if (auto [it, fresh] = first_seen_.emplace(t->id, where); !fresh) {
    errors_.push_back(
        error{where + ": id: duplicate id '" + t->id + "' (first at " + it->second + ")"});
    return;
  }
  if (t->provenance.empty()) t->provenance = file;
  tasks_.push_back(std::move(t).value());
}

void task_set_reader::add_lines(std::string_view text, const std::string& file) {
  int line = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view l = text.substr(pos, end - pos);
    ++line;
    pos = end + 1;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) {
      if (end == text.size()) break;
      continue;
    }
    add(l, file, line);
    if (end == text.size()) break;
  }
}

void task_set_reader::add_object(std::string_view text, const std::string& file) {
  add(text, file, 0);
}

void task_set_reader::add_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errors_.push_back(error{path + ": cannot open the file"});
    return;
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  const bool single = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (single)
    add_object(text, path);
  else
    add_lines(text, path);
}

result<std::vector<task>> load_task_file(const std::string& path) {
  task_set_reader r;
  r.add_file(path);
  if (!r.errors().empty()) {
    std::string msg = r.errors().front().message;
    if (r.errors().size() > 1)
      msg += " (and " + std::to_string(r.errors().size() - 1) + " more errors)";
    return error{msg};
  }
  return r.take_tasks();
}

std::string to_json_line(const task& t) { return to_json(t).dump(); }
std::string to_json_pretty(const task& t) { return to_json(t).dump(2); }

}  // namespace kforge::tasks
