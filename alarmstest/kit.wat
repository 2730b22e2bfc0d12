;; kit: the conformance kit's guest. A request's body is the alarm time
;; (i64 LE; 0 clears the alarm) and, optionally, how many times on-alarm
;; fails before it succeeds (u32 LE, kept under the key "f"). on-alarm
;; returns 1 (a failure) while its retry count is below that number.
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (import "wasmkeep:alarm" "clear-alarm" (func $clear_alarm (result i32)))
  (import "wasmkeep:actor" "request-read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "kv-get" (func $kv_get (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasmkeep:actor" "kv-put" (func $kv_put (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "f")

  (func (export "on-request") (param $req_len i32) (result i32)
    (i64.store (i32.const 0) (i64.const 0))
    (i32.store (i32.const 8) (i32.const 0))
    (drop (call $request_read (i32.const 0) (i32.const 12)))
    (drop (call $kv_put (i32.const 100) (i32.const 1) (i32.const 8) (i32.const 4)))
    (if (i64.eqz (i64.load (i32.const 0)))
      (then (return (call $clear_alarm))))
    (call $set_alarm (i64.load (i32.const 0))))

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (i32.store (i32.const 8) (i32.const 0))
    (drop (call $kv_get (i32.const 100) (i32.const 1) (i32.const 8) (i32.const 4) (i32.const 16)))
    (if (result i32) (i32.lt_u (local.get $retry_count) (i32.load (i32.const 8)))
      (then (i32.const 1))
      (else (i32.const 0))))
)
