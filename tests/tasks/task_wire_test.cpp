// Tasks on the wire: a task survives to_wire -> FlatBuffer bytes -> from_wire unchanged, and a bad
// wire task is an error, not a crash later.
#include <doctest/doctest.h>

#include <flatbuffers/flatbuffers.h>

#include <memory>

#include "tasks/task_parser.hpp"
#include "tasks/task_wire.hpp"

using namespace kforge::tasks;

TEST_CASE("a task survives the wire form and FlatBuffer bytes unchanged") {
  auto tasks = load_task_file(std::string(KFORGE_TEST_DATA) + "/data/good.jsonl");
  REQUIRE(tasks.ok());
  for (const auto& t : *tasks) {
    auto w = to_wire(t);
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(kforge::wire::Task::Pack(fbb, &w));
    flatbuffers::Verifier verifier(fbb.GetBufferPointer(), fbb.GetSize());
    REQUIRE(verifier.VerifyBuffer<kforge::wire::Task>(nullptr));
    std::unique_ptr<kforge::wire::TaskT> unpacked(
        flatbuffers::GetRoot<kforge::wire::Task>(fbb.GetBufferPointer())->UnPack());
    auto back = from_wire(*unpacked);
    REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.message()));
    CHECK(to_json_line(*back) == to_json_line(t));
  }
}

TEST_CASE("a bad wire task is an error naming the task and field") {
  auto tasks = load_task_file(std::string(KFORGE_TEST_DATA) + "/data/good.jsonl");
  REQUIRE(tasks.ok());
  auto w = to_wire((*tasks)[0]);
  w.category = "matmul";
  auto r = from_wire(w);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "task 't/softmax_rows' (wire): category: unknown category 'matmul'");

  w = to_wire((*tasks)[0]);
  w.inputs[0]->shape = {64, -1};
  r = from_wire(w);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() ==
        "task 't/softmax_rows' (wire): inputs[0].shape[1]: dimension -1 is not positive");

  w = to_wire((*tasks)[0]);
  w.inputs[0]->init.reset();
  r = from_wire(w);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "task 't/softmax_rows' (wire): inputs[0].init: required field is missing");

  // A draw marked as a parameter: the task format gives draws no role.
  w = to_wire((*tasks)[0]);
  auto draw = std::make_unique<kforge::wire::TensorSpecT>();
  draw->name = "d0";
  draw->shape = {4};
  draw->init = std::make_unique<kforge::wire::InitSpecT>();
  draw->init->dist = "normal";
  draw->parameter = true;
  w.draws.push_back(std::move(draw));
  w.prepare = "def prepare(d0):\n    return d0\n";
  r = from_wire(w);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("draws[0].parameter: a draw is no input of the reference") != std::string::npos);
}
