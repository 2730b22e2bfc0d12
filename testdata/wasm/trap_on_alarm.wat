;; trap_on_alarm: on-request sets an alarm at 1000 ms and returns 0; on-alarm
;; traps (unreachable).
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (unreachable))

  (func (export "on-request") (param $req_len i32) (result i32)
    (drop (call $set_alarm (i64.const 1000)))
    (i32.const 0))
)
