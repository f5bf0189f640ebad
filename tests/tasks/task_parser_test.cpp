// The task format parser: good files load with every field; each class of bad input fails with
// a message naming the file, the line, the field path and the reason.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tasks/task_parser.hpp"

using namespace kforge::tasks;
using json = nlohmann::json;

namespace {

const std::string data_dir = std::string(KFORGE_TEST_DATA) + "/data/";

json make_good(const std::string& id = "t/add") {
  auto j = json::parse(R"({
    "category": "elementwise", "description": "x + y.",
    "inputs": [{"name": "x", "shape": [4, 8], "dtype": "float32",
                "init": {"dist": "normal", "mean": 0.0, "std": 1.0}},
               {"name": "y", "shape": [4, 8], "dtype": "float32",
                "init": {"dist": "uniform", "low": -1, "high": 1}}],
    "outputs": [{"name": "z", "shape": [4, 8], "dtype": "float32"}],
    "reference": "def forward(x, y):\n    return x + y\n",
    "variants": [{"x": [2, 3], "y": [2, 3]}]})");
  j["id"] = id;
  return j;
}

// The error for `bad` when it is line 2 of set.jsonl (line 1 a good task), with the message
// checked to start with the location.
std::string error_of(const json& bad) {
  task_set_reader r;
  r.add_lines(make_good("t/first").dump() + "\n" + bad.dump() + "\n", "set.jsonl");
  REQUIRE(r.errors().size() == 1);
  CHECK(r.tasks().size() == 1);
  const std::string msg = r.errors().front().message;
  CHECK_MESSAGE(msg.rfind("set.jsonl:2: ", 0) == 0, msg);
  return msg;
}

bool has(const std::string& msg, const std::string& part) {
  return msg.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a good JSON Lines file loads every field; blank lines are skipped") {
  auto tasks = load_task_file(data_dir + "good.jsonl");
  REQUIRE_MESSAGE(tasks.ok(), (tasks.ok() ? "" : tasks.message()));
  REQUIRE(tasks->size() == 3);

  const task& s = (*tasks)[0];
  CHECK(s.id == "t/softmax_rows");
  CHECK(s.category == category::reduction);
  CHECK(s.description == "Softmax over the last dimension.");
  REQUIRE(s.inputs.size() == 1);
  CHECK(s.inputs[0].name == "x");
  CHECK(s.inputs[0].shape == shape{64, 128});
  CHECK(s.inputs[0].type == dtype::float32);
  CHECK(s.inputs[0].init.dist == distribution::normal);
  CHECK(s.outputs[0].shape == shape{64, 128});
  CHECK(s.reference == "def forward(x):\n    return torch.softmax(x, dim=-1)\n");
  CHECK(s.tolerance.atol == 1e-4);
  REQUIRE(s.variants.size() == 2);
  CHECK(s.variants[1].shapes.at("x") == shape{1, 17});
  CHECK_FALSE(s.allow_cublas);
  CHECK(s.provenance == data_dir + "good.jsonl");

  const task& g = (*tasks)[1];  // line 3: line 2 is blank
  CHECK(g.inputs[0].type == dtype::bfloat16);
  CHECK_FALSE(g.inputs[0].parameter);
  CHECK(g.inputs[1].parameter);  // "role": "parameter"
  CHECK(g.inputs[2].init.dist == distribution::constant);
  CHECK(g.inputs[2].init.value == 0.5);
  CHECK(g.allow_cublas);
  // No tolerance given and a bfloat16 output: the half-precision default.
  CHECK(g.tolerance.atol == 1e-2);
  CHECK(g.tolerance.rtol == 1e-2);

  const task& h = (*tasks)[2];
  CHECK(h.inputs[1].type == dtype::int64);
  CHECK(h.inputs[1].init.dist == distribution::randint);
  CHECK(h.inputs[1].init.high == 10);
  CHECK(h.tolerance.atol == 1e-4);  // float32 default
  CHECK(h.variants.empty());
  CHECK(h.provenance == "hand-written");
}

TEST_CASE("a .json file holds one pretty-printed task") {
  auto tasks = load_task_file(data_dir + "one_task.json");
  REQUIRE_MESSAGE(tasks.ok(), (tasks.ok() ? "" : tasks.message()));
  REQUIRE(tasks->size() == 1);
  CHECK((*tasks)[0].id == "t/relu");
}

TEST_CASE("to_json_line writes a task that parses back equal") {
  auto tasks = load_task_file(data_dir + "good.jsonl");
  REQUIRE(tasks.ok());
  for (const auto& t : *tasks) {
    const auto line = to_json_line(t);
    CHECK(line.find('\n') == std::string::npos);
    auto back = parse_task(line, "roundtrip");
    REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.message()));
    CHECK(to_json_line(*back) == line);
    CHECK(back->variants.size() == t.variants.size());
    CHECK(back->tolerance.atol == t.tolerance.atol);
  }
}

TEST_CASE("a file with bad lines keeps the good ones and reports each bad one by line") {
  task_set_reader r;
  r.add_file(data_dir + "bad.jsonl");
  CHECK(r.tasks().size() == 3);  // compile and degeneracy are not the parser's business
  REQUIRE(r.errors().size() == 1);
  CHECK(r.errors()[0].message ==
        data_dir + "bad.jsonl:2: inputs[0].dtype: unknown dtype 'float33' (expected float32, "
                   "float16, bfloat16, int32, int64 or bool)");
  auto all = load_task_file(data_dir + "bad.jsonl");
  REQUIRE_FALSE(all.ok());
  CHECK(has(all.message(), "bad.jsonl:2:"));
}

TEST_CASE("an unreadable file is an error naming it") {
  auto t = load_task_file(data_dir + "no_such_file.jsonl");
  REQUIRE_FALSE(t.ok());
  CHECK(t.message() == data_dir + "no_such_file.jsonl: cannot open the file");
}

TEST_CASE("error: invalid JSON") {
  task_set_reader r;
  r.add_lines(make_good().dump() + "\n{\"id\": \"t/x\", \n", "set.jsonl");
  REQUIRE(r.errors().size() == 1);
  CHECK(r.errors()[0].message.rfind("set.jsonl:2: invalid JSON: ", 0) == 0);
}

TEST_CASE("error: unknown key, at the top and nested") {
  auto j = make_good();
  j["categry"] = "gemm";
  auto msg = error_of(j);
  CHECK(has(msg, "set.jsonl:2: categry: unknown key (expected one of: id, category,"));

  j = make_good();
  j["inputs"][1]["init"]["sigma"] = 1.0;
  msg = error_of(j);
  CHECK(has(msg, "inputs[1].init.sigma: unknown key (expected one of: dist, low, high)"));

  j = make_good();
  j["outputs"][0]["init"] = {{"dist", "normal"}};
  CHECK(has(error_of(j), "outputs[0].init: unknown key (expected one of: name, shape, dtype)"));
}

TEST_CASE("an input's role: input or parameter, written back only for a parameter; a draw has none") {
  auto j = make_good();
  j["inputs"][0]["role"] = "input";
  j["inputs"][1]["role"] = "parameter";
  auto t = parse_task(j.dump(), "roles");
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  CHECK_FALSE(t->inputs[0].parameter);
  CHECK(t->inputs[1].parameter);
  const auto line = json::parse(to_json_line(*t));
  CHECK_FALSE(line["inputs"][0].contains("role"));
  CHECK(line["inputs"][1]["role"] == "parameter");

  j["inputs"][1]["role"] = "weight";
  CHECK(has(error_of(j), "inputs[1].role: unknown role 'weight' (expected input, parameter)"));
  j["inputs"][1]["role"] = true;
  CHECK(has(error_of(j), "inputs[1].role:"));

  // An input prepare computes may be a parameter; a draw is no input of the reference.
  j = make_good();
  j["draws"] = j["inputs"];
  j["prepare"] = "def prepare(x, y):\n    return (x, y)\n";
  for (auto& in : j["inputs"]) in.erase("init");
  j.erase("variants");
  j["inputs"][1]["role"] = "parameter";
  auto prepared = parse_task(j.dump(), "prepared");
  REQUIRE_MESSAGE(prepared.ok(), (prepared.ok() ? "" : prepared.message()));
  CHECK(prepared->inputs[1].parameter);
  j["draws"][0]["role"] = "parameter";
  CHECK(has(error_of(j), "draws[0].role: unknown key (expected one of: name, shape, dtype, init)"));
}

TEST_CASE("error: a required field is missing") {
  auto j = make_good();
  j.erase("reference");
  CHECK(error_of(j) == "set.jsonl:2: reference: required field is missing");
  j = make_good();
  j["inputs"][0].erase("init");
  CHECK(error_of(j) == "set.jsonl:2: inputs[0].init: required field is missing");
  // A distribution's parameters are required too: no silent mean 0 / std 1.
  j = make_good();
  j["inputs"][0]["init"].erase("std");
  CHECK(error_of(j) == "set.jsonl:2: inputs[0].init.std: required field is missing");
}

TEST_CASE("error: wrong type") {
  auto j = make_good();
  j["inputs"][0]["shape"] = "4x8";
  CHECK(error_of(j) == "set.jsonl:2: inputs[0].shape: must be an array, got string");
  j = make_good();
  j["inputs"][0]["shape"] = {4, 8.5};
  CHECK(error_of(j) == "set.jsonl:2: inputs[0].shape[1]: must be an integer, got number");
  j = make_good();
  j["allow_cublas"] = "yes";
  CHECK(error_of(j) == "set.jsonl:2: allow_cublas: must be true or false, got string");
  j = make_good();
  j["inputs"] = json::object();
  CHECK(error_of(j) == "set.jsonl:2: inputs: must be an array, got object");
  task_set_reader r;
  r.add_lines("[1, 2]\n", "set.jsonl");
  REQUIRE(r.errors().size() == 1);
  CHECK(r.errors()[0].message == "set.jsonl:1: task: must be an object, got array");
}

TEST_CASE("error: bad dtype, distribution or category") {
  auto j = make_good();
  j["outputs"][0]["dtype"] = "fp32";
  CHECK(has(error_of(j), "outputs[0].dtype: unknown dtype 'fp32' (expected float32,"));
  j = make_good();
  j["inputs"][0]["init"] = {{"dist", "gaussian"}};
  CHECK(error_of(j) == "set.jsonl:2: inputs[0].init.dist: unknown distribution 'gaussian' "
                       "(expected normal, uniform, randint or constant)");
  j = make_good();
  j["category"] = "matmul";
  CHECK(error_of(j) == "set.jsonl:2: category: unknown category 'matmul' (expected "
                       "elementwise, reduction, normalization, gemm, conv, fused or other)");
}

TEST_CASE("error: a distribution that does not fit its parameters or dtype") {
  auto j = make_good();
  j["inputs"][0]["init"]["std"] = 0.0;
  CHECK(error_of(j) == "set.jsonl:2: inputs[0].init.std: must be positive");
  j = make_good();
  j["inputs"][1]["init"] = {{"dist", "uniform"}, {"low", 1}, {"high", 1}};
  CHECK(error_of(j) == "set.jsonl:2: inputs[1].init.high: must be greater than low");
  j = make_good();
  j["inputs"][0]["dtype"] = "int32";
  CHECK(error_of(j) == "set.jsonl:2: inputs[0].init.dist: normal needs a floating dtype, "
                       "input is int32");
  j = make_good();
  j["inputs"][0]["init"] = {{"dist", "randint"}, {"low", 0}, {"high", 2.5}};
  CHECK(error_of(j) == "set.jsonl:2: inputs[0].init.high: must be an integer for randint");
}

TEST_CASE("error: empty or malformed id") {
  CHECK(error_of(make_good("")) == "set.jsonl:2: id: must not be empty");
  CHECK(error_of(make_good("has space")) ==
        "set.jsonl:2: id: 'has space' may only hold letters, digits and _ - . /");
}

TEST_CASE("error: an id that would climb out of a folder, hide in one, or run long") {
  const std::string dot_name = "has a name starting with '.'";
  CHECK(has(error_of(make_good("../../x")), "id: '../../x' " + dot_name));
  CHECK(has(error_of(make_good("l1/../../x")), "id: 'l1/../../x' " + dot_name));
  CHECK(has(error_of(make_good("l1/./relu")), dot_name));
  CHECK(has(error_of(make_good(".hidden")), dot_name));
  const std::string empty_name = "has an empty name: '/' may only separate names";
  CHECK(has(error_of(make_good("/etc/x")), "id: '/etc/x' " + empty_name));
  CHECK(has(error_of(make_good("l1//relu")), empty_name));
  CHECK(has(error_of(make_good("l1/")), empty_name));
  CHECK(error_of(make_good(std::string(max_task_id_length + 1, 'a'))) ==
        "set.jsonl:2: id: is 129 characters long, more than 128");
}

TEST_CASE("ids of the built-in and KernelBench kinds pass") {
  for (const std::string& id : std::vector<std::string>{
           "l1/relu", "l2/gemm_bias_relu", "synth/3f2a9c01bb7e", "drill/12", "a.b-c_d",
           "level1/12_Matmul_with_diagonal_matrices_", std::string(max_task_id_length, 'a')}) {
    CAPTURE(id);
    CHECK(check_task_id(id).ok());
  }
}

TEST_CASE("task_dir puts a task's folder inside the folder given, or refuses the id") {
  auto good = task_dir("out", "l1/relu");
  REQUIRE(good.ok());
  CHECK(*good == "out/l1/relu");
  for (const std::string id : {"../../x", "/abs", "l1/../../x", ""}) {
    CAPTURE(id);
    auto bad = task_dir("out", id);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.message().rfind("id: ", 0) == 0);
  }
}

TEST_CASE("error: duplicate ids in a set name both lines") {
  task_set_reader r;
  r.add_lines(make_good("t/a").dump() + "\n" + make_good("t/b").dump() + "\n" +
                  make_good("t/a").dump() + "\n",
              "set.jsonl");
  REQUIRE(r.errors().size() == 1);
  CHECK(r.errors()[0].message == "set.jsonl:3: id: duplicate id 't/a' (first at set.jsonl:1)");
  CHECK(r.tasks().size() == 2);
  // Across files too.
  r.add_lines(make_good("t/b").dump(), "other.jsonl");
  REQUIRE(r.errors().size() == 2);
  CHECK(r.errors()[1].message == "other.jsonl:1: id: duplicate id 't/b' (first at set.jsonl:2)");
}

TEST_CASE("error: a variant naming an unknown input or changing the rank") {
  auto j = make_good();
  j["variants"] = json::array({json{{"x", {2, 3}}, {"q", {2, 3}}}});
  CHECK(error_of(j) == "set.jsonl:2: variants[0].q: no input is named 'q'");
  j = make_good();
  j["variants"] = json::array({json{{"x", {6}}}});
  CHECK(error_of(j) == "set.jsonl:2: variants[0].x: has rank 1 but input 'x' has rank 2");
  j = make_good();
  j["variants"] = json::array({json::object()});
  CHECK(error_of(j) == "set.jsonl:2: variants[0]: a variant must name at least one input");
}

TEST_CASE("error: a shape with a non-positive dimension") {
  auto j = make_good();
  j["inputs"][1]["shape"] = {4, 0};
  CHECK(error_of(j) == "set.jsonl:2: inputs[1].shape[1]: dimension 0 is not positive");
  j = make_good();
  j["variants"] = json::array({json{{"x", {-2, 3}}}});
  CHECK(error_of(j) == "set.jsonl:2: variants[0].x[0]: dimension -2 is not positive");
  j = make_good();
  j["outputs"][0]["shape"] = {4, 8, 1, 1, 1, 1, 1, 1, 1};
  CHECK(error_of(j) ==
        "set.jsonl:2: outputs[0].shape: more than 8 dimensions (the kernel ABI's limit)");
}

TEST_CASE("error: names that cannot be forward's arguments, or clash") {
  auto j = make_good();
  j["inputs"][1]["name"] = "x";
  CHECK(error_of(j) == "set.jsonl:2: inputs[1].name: duplicate name 'x'");
  j = make_good();
  j["inputs"][0]["name"] = "2x";
  CHECK(error_of(j) == "set.jsonl:2: inputs[0].name: '2x' is not a valid identifier");
  j = make_good();
  j["outputs"][0]["name"] = "y";
  CHECK(has(error_of(j), "outputs[0].name: duplicate name 'y' (input and output names share"));
}

TEST_CASE("error: a reference without forward, a key given twice, a negative tolerance") {
  auto j = make_good();
  j["reference"] = "def fwd(x, y):\n    return x\n";
  CHECK(error_of(j) == "set.jsonl:2: reference: must define `def forward(...)`");
  j = make_good();
  j["tolerance"] = {{"atol", -1e-4}, {"rtol", 1e-4}};
  CHECK(error_of(j) == "set.jsonl:2: tolerance.atol: must be a finite number >= 0");
  j = make_good();
  j["tolerance"] = {{"atol", 1e-4}};
  CHECK(error_of(j) == "set.jsonl:2: tolerance.rtol: required field is missing");

  task_set_reader r;
  std::string text = make_good().dump();
  text.insert(1, "\"description\": \"first\", ");
  r.add_lines(text, "set.jsonl");
  REQUIRE(r.errors().size() == 1);
  CHECK(r.errors()[0].message == "set.jsonl:1: description: key given twice in one object");
}

TEST_CASE("shape helpers: smallest shapes and input shapes of a variant") {
  auto t = parse_task(make_good().dump(), "x");
  REQUIRE(t.ok());
  CHECK(input_shapes(*t, std::nullopt) == std::vector<shape>{{4, 8}, {4, 8}});
  CHECK(input_shapes(*t, 0) == std::vector<shape>{{2, 3}, {2, 3}});
  CHECK(smallest_shapes(*t) == shape_choice(0));
  t->variants[0].shapes = {{"x", {40, 80}}};  // y keeps its primary shape
  CHECK(input_shapes(*t, 0) == std::vector<shape>{{40, 80}, {4, 8}});
  CHECK(smallest_shapes(*t) == std::nullopt);
  CHECK(numel({}) == 1);
  CHECK(to_string(shape{4096, 4096}) == "[4096, 4096]");
}
