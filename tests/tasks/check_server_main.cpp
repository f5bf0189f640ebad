// The child `kforge tasks validate` starts (`kforge tasks check-server`), for test_tasks, which
// calls tasks_command in its own process and so has no kforge executable to start.
#include "tasks/check_server.hpp"

int main() { return kforge::tasks::serve_task_checks(); }
