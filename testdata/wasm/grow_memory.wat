;; grow_memory: on-request tries to grow memory by 8192 pages (512 MiB) and
;; responds with what memory.grow returned (i32 LE: -1 when refused).
(module
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-request") (param $req_len i32) (result i32)
    (i32.store (i32.const 0) (memory.grow (i32.const 8192)))
    (drop (call $response_write (i32.const 0) (i32.const 4)))
    (i32.const 0))
)
