#!/usr/bin/env bash
# A stand-in for `kforge sandbox-child` / `kforge sandbox-ref` in CPU tests of the supervisor
# (runner_test.cpp): it speaks the line protocol of sandbox/child_protocol.hpp on fd 3 and
# misbehaves on request. The candidate "library" path names the behaviour (the runner's copy of it
# is lib/N-NAME): .../ok, hang, crash,
# garbage, flood, wrong, stale, hidden, mutate, env, refdie, slow (each check takes 0.5 s), crawl
# (every timed trial takes 100 ms: cut to 3 trials when the time request's slow_ms is below that),
# forged (names a file not its output),
# ipc (hands over an IPC handle the fake server cannot open), ipcbad (no handles at all),
# timedwrong (right in every check, wrong in its last timed trial), second (a second reply line
# after its first check's), unasked (a line on the channel before its first check is asked for),
# nonce (a reply without the request's nonce), sigsys (killed as by the seccomp filter),
# nofields (a time reply without its trials), profilefail (fails its profile call: under ncu, for
# the Nsight Compute profile, ncu_profiler.hpp).
# Replies echo the request's nonce (child_protocol.hpp).
set -u
role=${1:-}
mode=ok
checks=0
field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p" <<<"$2"; }
num() { sed -n "s/.*\"$1\":\\([0-9-]*\\).*/\\1/p" <<<"$2"; }
reply() {
  local nonce
  nonce=$(field nonce "$line")
  if [[ -n $nonce && $mode != nonce ]]; then printf '%s\n' "${1%\}},\"nonce\":\"$nonce\"}" >&3
  else printf '%s\n' "$1" >&3; fi
}
while IFS= read -r line <&3; do
  op=$(field op "$line")
  if [[ $role == sandbox-ref ]]; then
    case $op in
      hello) reply '{"ok":true,"gpu":{"name":"Fake GPU","major":9,"minor":0,"sm_count":132,"shared_per_block":49152,"shared_per_block_optin":232448,"shared_per_sm":233472,"registers_per_sm":65536,"l2_bytes":52428800,"memory_bytes":150000000000,"memory_bandwidth_gbs":4800.0}}' ;;
      prepare)
        if grep -q '"id":"fake/refdie"' <<<"$line"; then exit 7; fi
        reply '{"ok":true,"output_shapes":[[[4]],[[4]],[[4]]]}' ;;
      compare)
        # Handles the fake cannot open (as on a host without CUDA IPC), or none for the outputs.
        if grep -q '"ipc":\[\]' <<<"$line"; then
          reply '{"ok":true,"close":false,"bad_share":"the child sent 0 output handles for 1 outputs"}'; continue
        elif grep -q '"ipc":\[' <<<"$line"; then
          reply '{"ok":false,"status":"infra_error","reason":"outputs over CUDA IPC unavailable: fake"}'; continue
        fi
        f=$(sed -n 's/.*"files":\["\([^"]*\)".*/\1/p' <<<"$line")
        content=$(cat "$f" 2>/dev/null)
        case $content in
          ok) reply '{"ok":true,"close":true,"max_abs":0.0,"max_rel":0.0,"first_bad":-1,"bad_tensor":0,"bad_count":0,"stale":false}' ;;
          stale) reply '{"ok":true,"close":false,"max_abs":1.0,"max_rel":1.0,"first_bad":0,"bad_tensor":0,"bad_count":4,"stale":true}' ;;
          *) reply '{"ok":true,"close":false,"max_abs":0.5,"max_rel":0.25,"first_bad":3,"bad_tensor":0,"bad_count":1,"stale":false}' ;;
        esac ;;
      time) reply '{"ok":true,"event_ms":[2.0,2.0,2.0,2.0,2.0,2.0,2.0,2.0,2.0,2.0]}' ;;
      release) reply '{"ok":true,"released":true}' ;;  # as if the set were larger than its share
      *) reply '{"ok":false,"status":"infra_error","reason":"fake ref: unknown op"}' ;;
    esac
    continue
  fi
  case $op in
    hello) reply '{"ok":true,"gpu":{},"free_bytes":1}' ;;
    probe) reply '{"ok":true}' ;;
    load) mode=$(basename "$(field library "$line")"); mode=${mode#*-}; checks=0; reply '{"ok":true}'
          if [[ $mode == unasked ]]; then printf '%s\n' '{"ok":true}' >&3; fi ;;
    check)
      dir=$(field dir "$line")
      out="$dir/check$(num check "$line")_out0.bin"  # child_protocol.hpp's output_file
      checks=$((checks + 1))
      case $mode in
        hang) sleep 1000 ;;
        second) printf '%s' ok >"$out"; reply "{\"ok\":true,\"files\":[\"$out\"]}"; reply '{"ok":true}' ;;
        sigsys) kill -SYS $$ ;;
        crash) kill -SEGV $$ ;;
        garbage) printf 'this is not json\n' >&3 ;;
        flood) head -c 200000 /dev/zero | tr '\0' 'x'; printf '%s' ok >"$out"
               reply "{\"ok\":true,\"files\":[\"$out\"]}" ;;
        mutate) reply '{"ok":false,"status":"hack_suspected","reason":"the candidate changed input 0","fatal":false}' ;;
        forged) reply '{"ok":true,"files":["/tmp/kforge-forged-target"]}' ;;
        ipc) if grep -q '"ipc":true' <<<"$line"; then reply '{"ok":true,"ipc":["00"]}'
             else printf '%s' ok >"$out"; reply "{\"ok\":true,\"files\":[\"$out\"]}"; fi ;;
        ipcbad) reply '{"ok":true,"ipc":[]}' ;;
        env) if [[ -n ${KFORGE_TEST_SECRET:-} ]]; then
               reply '{"ok":false,"status":"runtime_error","reason":"saw the secret"}'
             else
               printf '%s' ok >"$out"; reply "{\"ok\":true,\"files\":[\"$out\"]}"
             fi ;;
        slow) sleep 0.5; printf '%s' ok >"$out"; reply "{\"ok\":true,\"files\":[\"$out\"]}" ;;
        wrong) printf '%s' wrong >"$out"; reply "{\"ok\":true,\"files\":[\"$out\"]}" ;;
        stale) if ((checks > 1)); then printf '%s' stale >"$out"; else printf '%s' ok >"$out"; fi
               reply "{\"ok\":true,\"files\":[\"$out\"]}" ;;
        *) printf '%s' ok >"$out"; reply "{\"ok\":true,\"files\":[\"$out\"]}" ;;
      esac ;;
    time)
      # The last trial's outputs, as a check's (child_protocol.hpp: timed_check is 99).
      tdir=$(field dir "$line")
      tout="$tdir/check99_out0.bin"
      if [[ $mode == timedwrong ]]; then printf '%s' wrong >"$tout"; else printf '%s' ok >"$tout"; fi
      last=$(sed -n 's/.*"seeds":\[\([0-9]*\).*/\1/p' <<<"$line")
      outs="\"files\":[\"$tout\"],\"last_seed\":$last"
      slow_ms=$(sed -n 's/.*"slow_ms":\([0-9.e+-]*\).*/\1/p' <<<"$line")
      if [[ $mode == crawl ]]; then
        if [[ -n $slow_ms ]] && awk "BEGIN{exit !(100 > $slow_ms)}"; then
          reply "{\"ok\":true,$outs,\"event_ms\":[100,100,100],\"wall_ms\":[100.1,100.1,100.1]}"
        else
          reply "{\"ok\":true,$outs,\"event_ms\":[100,100,100,100,100,100,100,100,100,100],\"wall_ms\":[100.1,100.1,100.1,100.1,100.1,100.1,100.1,100.1,100.1,100.1]}"
        fi
      elif [[ $mode == nofields ]]; then  # a time reply without its trials
        reply "{\"ok\":true,$outs}"
      elif [[ $mode == hidden ]]; then
        reply "{\"ok\":true,$outs,\"event_ms\":[0.01,0.01,0.01,0.01,0.01,0.01,0.01,0.01,0.01,0.01],\"wall_ms\":[3,3,3,3,3,3,3,3,3,3]}"
      elif [[ $mode == fast && $line == *'"fresh":true'* ]]; then  # the re-timing: 20x slower
        reply "{\"ok\":true,$outs,\"event_ms\":[2,2,2,2,2,2,2,2,2,2],\"wall_ms\":[2.02,2.02,2.02,2.02,2.02,2.02,2.02,2.02,2.02,2.02]}"
      elif [[ $mode == fast || $mode == fastsure ]]; then  # 20x faster than the fake baseline
        reply "{\"ok\":true,$outs,\"event_ms\":[0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1],\"wall_ms\":[0.11,0.11,0.11,0.11,0.11,0.11,0.11,0.11,0.11,0.11]}"
      else
        reply "{\"ok\":true,$outs,\"event_ms\":[1,1,1,1,1,1,1,1,1,1],\"wall_ms\":[1.02,1.02,1.02,1.02,1.02,1.02,1.02,1.02,1.02,1.02]}"
      fi ;;
    profile) printf 'the candidate printed this while profiled\n'
             if [[ $mode == profilefail ]]; then
               reply '{"ok":false,"status":"runtime_error","reason":"CUDA error in the candidate'"'"'s kernel: fake","fatal":true}'
             else reply '{"ok":true}'; fi ;;
    unload) reply '{"ok":true,"recycle":false}' ;;
    *) reply '{"ok":false,"status":"infra_error","reason":"fake child: unknown op"}' ;;
  esac
done
