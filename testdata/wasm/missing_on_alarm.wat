;; missing_on_alarm: imports set-alarm but exports no on-alarm; the host must
;; refuse it at load. It exports on-request only (which sets an alarm at
;; 1000 ms and returns 0).
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-request") (param $req_len i32) (result i32)
    (drop (call $set_alarm (i64.const 1000)))
    (i32.const 0))
)
