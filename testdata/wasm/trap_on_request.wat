;; trap_on_request: on-request sets an alarm at 1000 ms, then traps
;; (unreachable), so the event fails and its alarm must not commit. on-alarm
;; returns 0.
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (i32.const 0))

  (func (export "on-request") (param $req_len i32) (result i32)
    (drop (call $set_alarm (i64.const 1000)))
    (unreachable))
)
