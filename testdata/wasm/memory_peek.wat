;; memory_peek: on-request responds with the 64 bytes of its memory at 1024
;; as they are, then copies the request (up to 64 bytes) there. A fresh
;; instance's first response is all zero: no data segment covers 1024.
(module
  (import "wasmkeep:actor" "request-read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-request") (param $len i32) (result i32)
    (drop (call $response_write (i32.const 1024) (i32.const 64)))
    (if (i32.gt_u (local.get $len) (i32.const 64))
      (then (local.set $len (i32.const 64))))
    (drop (call $request_read (i32.const 1024) (local.get $len)))
    (i32.const 0))
)
