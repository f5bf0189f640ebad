#pragma once
// The broker <-> worker protocol, "KFB1": a Paranoid Pirate variant with credit. Spoken between
// the broker's backend ROUTER and each worker's DEALER. Frames are listed as the DEALER sends and
// receives them; the ROUTER adds (on receive) and takes (on send) one routing-id frame in front.
// Integers are little-endian and fixed-size.
//
// worker -> broker
//   READY      ["KFB1", 0x01, credit:u32, heartbeat_ms:u32, name]
//                  Opens a session. credit = how many work items the worker may hold at once;
//                  heartbeat_ms = how often it will send something (the broker declares it dead
//                  after liveness * heartbeat_ms of silence).
//   HEARTBEAT  ["KFB1", 0x02]
//   RESULT     ["KFB1", 0x03, work_id:u64, envelope]
//                  Completes work_id and gives its credit back. The broker forwards the envelope
//                  to the result sink only if this worker still holds work_id, so a late result
//                  from a worker already declared dead is dropped (counted "stale"), never doubled.
//   DISCONNECT ["KFB1", 0x04]
//                  Leaves the pool; work it still held is re-queued as after a death.
//
// broker -> worker
//   WORK       ["KFB1", 0x11, envelope]     work_id = the envelope's message_id; uses one credit
//   HEARTBEAT  ["KFB1", 0x12]
//   RECONNECT  ["KFB1", 0x13]
//                  The broker has no session for this routing id (the worker was declared dead,
//                  or the broker restarted): the worker drops the work it held (it has been
//                  re-queued), rebuilds its socket and sends READY again.
//
// Any message in either direction counts as a heartbeat. Both sides send HEARTBEAT every interval
// whether or not other traffic flowed, which keeps the rule simple and costs one tiny frame.

#include <cstdint>
#include <string_view>

namespace kforge::bus::protocol {

/// First frame of every message, so a stray peer speaking something else is rejected at once.
inline constexpr std::string_view tag = "KFB1";

/// Second frame: one byte.
enum class command : std::uint8_t {
  ready = 0x01,
  worker_heartbeat = 0x02,
  result = 0x03,
  disconnect = 0x04,
  work = 0x11,
  broker_heartbeat = 0x12,
  reconnect = 0x13,
};

}  // namespace kforge::bus::protocol
