#pragma once
// Tasks on the wire: wire::TaskT (messages/task.fbs, object API) <-> tasks::task.

#include "common/result.hpp"
#include "messages/task_generated.h"
#include "tasks/task.hpp"

namespace kforge::tasks {

/// The wire form of a task; every field is set explicitly (no schema default is relied on).
wire::TaskT to_wire(const task& t);

/// A task from the wire, checked with check_task: a message is input like any file, so a bad one
/// is an error "task 'ID' (wire): FIELD: REASON", never a crash later in the sandbox.
result<task> from_wire(const wire::TaskT& w);

}  // namespace kforge::tasks
