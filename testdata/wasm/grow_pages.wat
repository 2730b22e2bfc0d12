;; grow_pages: on-request grows memory by the number of 64 KiB pages in the
;; request's first 4 bytes (u32 LE; 0 when shorter), traps when memory.grow
;; fails (as a guest's allocator aborts), writes to the last byte of memory,
;; and responds with memory.size in pages (i32 LE). It imports nothing from
;; wasmkeep:alarm, so it needs no on-alarm.
(module
  (import "wasmkeep:actor" "request-read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-request") (param $len i32) (result i32)
    (i32.store (i32.const 0) (i32.const 0))
    (if (i32.ge_u (local.get $len) (i32.const 4))
      (then (drop (call $request_read (i32.const 0) (i32.const 4)))))
    (if (i32.eq (memory.grow (i32.load (i32.const 0))) (i32.const -1))
      (then (unreachable)))
    (i32.store8 (i32.sub (i32.shl (memory.size) (i32.const 16)) (i32.const 1)) (i32.const 1))
    (i32.store (i32.const 4) (memory.size))
    (drop (call $response_write (i32.const 4) (i32.const 4)))
    (i32.const 0))
)
