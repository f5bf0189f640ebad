#pragma once
// Data-parallel ranks in separate processes without NCCL (trainer/collective.hpp): the CPU ranks
// of a trainer whose ranks are processes (trainer.ranks = "processes"), or any host without GPUs.
// Rank 0 binds a ZeroMQ socket at `endpoint` (ipc:// on one host; tcp://HOST:PORT across hosts,
// bound on HOST's interface) and every other rank connects to it. A sum gathers every rank's
// tensors at rank 0, which adds them in rank order — the thread group's order, so a run with
// process ranks gives bit-identical sums to one with thread ranks — and sends the result back; a
// broadcast goes through rank 0. Dtypes and shapes are checked at rank 0: a mismatch is an error
// on every rank, not a wrong sum.
//
// Every call waits at most `timeout` for the other ranks (a rank that died or fell behind makes
// the call an error naming the ranks that did not answer), and gives up sooner when `give_up`
// says so (rank 0's driver knows when a rank process has died). Calls are numbered, so a late
// message of an earlier call is never taken for the current one; an error at rank 0 is sent to
// every rank. Tensors may be on any device; they travel through host memory, so this is for CPU
// ranks. Includes ATen's Tensor only (collective.hpp).

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/result.hpp"
#include "trainer/collective.hpp"

namespace kforge::trainer {

/// Joins the group at `endpoint` as `rank` of `size` (rank 0 binds, the others connect). Blocks
/// until every rank has joined, or fails after `timeout` naming who is missing.
/// `give_up` (optional) is asked a few times a second while waiting: true ends the wait with an error.
result<std::shared_ptr<collective>> make_socket_group(const std::string& endpoint, int rank, int size,
                                                      std::chrono::milliseconds timeout,
                                                      std::function<bool()> give_up = {});

}  // namespace kforge::trainer
