;; bad_pointer: every import that takes a pointer, given one outside memory.
;; on-request sets an alarm at 5000 ms (so the event has a change to commit),
;; then writes four i32 LE errnos as the response, in this order:
;;   get-alarm(65532)            8 bytes from 65532 pass the end of the 1 page
;;   get-alarm(-1 as i32)        0xffffffff
;;   request-read(65530, 100)    100 bytes from 65530 pass the end
;;   response-write(65530, 100)  likewise
;; The errnos are kept at 0..16 and written with response-write(0, 16) at the
;; end, so the last one is reported too. Returns 0.
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (import "wasmkeep:alarm" "get-alarm" (func $get_alarm (param i32) (result i32)))
  (import "wasmkeep:actor" "request-read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (i32.const 0))

  (func (export "on-request") (param $req_len i32) (result i32)
    (drop (call $set_alarm (i64.const 5000)))
    (i32.store (i32.const 0) (call $get_alarm (i32.const 65532)))
    (i32.store (i32.const 4) (call $get_alarm (i32.const -1)))
    (i32.store (i32.const 8) (call $request_read (i32.const 65530) (i32.const 100)))
    (i32.store (i32.const 12) (call $response_write (i32.const 65530) (i32.const 100)))
    (drop (call $response_write (i32.const 0) (i32.const 16)))
    (i32.const 0))
)
