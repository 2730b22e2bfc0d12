;; init_clock: a reactor whose _initialize reads the wall clock, as a Go
;; guest's runtime does as it starts, and keeps it (i64 LE, nanoseconds) at
;; memory 16; it also writes 1 to the memory's last byte. The memory is 17
;; pages, larger than 1 MiB, so an image of it is mapped into each
;; instance on Linux. on-request responds with memory 16..24 (the time
;; _initialize read) and the last byte, and returns 0.
(module
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (memory (export "memory") 17)

  (func (export "_initialize")
    (drop (call $clock_time_get (i32.const 0) (i64.const 1) (i32.const 16)))
    (i32.store8 (i32.const 1114111) (i32.const 1)))

  (func (export "on-request") (param $req_len i32) (result i32)
    (i32.store8 (i32.const 24) (i32.load8_u (i32.const 1114111)))
    (drop (call $response_write (i32.const 16) (i32.const 9)))
    (i32.const 0))
)
