;; actor_id: actor-id with a buffer that fits, one too short, and pointers
;; outside memory. _initialize calls it too, outside any event, and keeps
;; the errno at 20. on-request keeps five errnos at 0..20:
;;   actor-id(1024, 228, 100)      fits: the identity at 1024, its length at 100
;;   actor-id(2048, 3, 104)        3 bytes are too short: E2BIG, the length at
;;                                 104, nothing copied to 2048
;;   actor-id(65530, 228, 108)     the identity from 65530 passes the end
;;   actor-id(1024, 228, 65533)    4 bytes from 65533 pass the end
;;   actor-id(1024, 228, -1)       0xffffffff
;; then responds with memory 0..24 (the six errnos), 100..112 (the three
;; lengths), 2048..2051 (untouched: zero) and the identity from 1024. Returns 0.
(module
  (import "wasmkeep:actor" "actor-id" (func $actor_id (param i32 i32 i32) (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (i32.const 0))

  (func (export "_initialize")
    (i32.store (i32.const 20) (call $actor_id (i32.const 1024) (i32.const 228) (i32.const 100))))

  (func (export "on-request") (param $req_len i32) (result i32)
    (i32.store (i32.const 0) (call $actor_id (i32.const 1024) (i32.const 228) (i32.const 100)))
    (i32.store (i32.const 4) (call $actor_id (i32.const 2048) (i32.const 3) (i32.const 104)))
    (i32.store (i32.const 8) (call $actor_id (i32.const 65530) (i32.const 228) (i32.const 108)))
    (i32.store (i32.const 12) (call $actor_id (i32.const 1024) (i32.const 228) (i32.const 65533)))
    (i32.store (i32.const 16) (call $actor_id (i32.const 1024) (i32.const 228) (i32.const -1)))
    (drop (call $response_write (i32.const 0) (i32.const 24)))
    (drop (call $response_write (i32.const 100) (i32.const 12)))
    (drop (call $response_write (i32.const 2048) (i32.const 3)))
    (drop (call $response_write (i32.const 1024) (i32.load (i32.const 100))))
    (i32.const 0))
)
