;; embedder_imports: a guest of a host that brings its own runtime. It
;; imports WASI, a host module of the embedder's own ("example:host") and
;; wasmkeep:alarm side by side. on-request sets the alarm to
;; offset() + 1000 * (the number of environment variables) and responds with
;; that count (i32 LE); on-alarm returns 0.
(module
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "example:host" "offset" (func $offset (result i64)))
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (i32.const 0))

  (func (export "on-request") (param $req_len i32) (result i32)
    (drop (call $environ_sizes_get (i32.const 0) (i32.const 4)))
    (drop (call $response_write (i32.const 0) (i32.const 4)))
    (call $set_alarm
      (i64.add (call $offset)
               (i64.mul (i64.extend_i32_u (i32.load (i32.const 0))) (i64.const 1000)))))
)
