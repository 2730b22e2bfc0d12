;; wrong_signature: imports set-alarm but exports on-alarm with the wrong
;; signature, (param i32) (result i32) instead of
;; (param $scheduled_ms i64) (param $retry_count i32) (result i32). The host
;; must refuse it at load. Its on-request is otherwise fine.
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-alarm") (param $scheduled_ms i32) (result i32)
    (i32.const 0))

  (func (export "on-request") (param $req_len i32) (result i32)
    (drop (call $set_alarm (i64.const 1000)))
    (i32.const 0))
)
