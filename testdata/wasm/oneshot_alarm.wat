;; oneshot_alarm: on-request sets the alarm to the time given as the
;; request's first 8 bytes (i64 LE); on-alarm returns 0, so each alarm fires
;; once and is gone.
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (import "wasmkeep:actor" "request-read" (func $request_read (param i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (i32.const 0))

  (func (export "on-request") (param $req_len i32) (result i32)
    (drop (call $request_read (i32.const 0) (i32.const 8)))
    (call $set_alarm (i64.load (i32.const 0))))
)
