;; init_calls: calls the alarm imports from _initialize, the start function,
;; which runs outside any event. It keeps the three errnos (EPERM each) as i32
;; LE at memory 16..28, in this order:
;;   set-alarm(1000)   get-alarm(0)   clear-alarm()
;; on-request writes those 12 bytes as the response (response-write(16, 12))
;; and returns 0.
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (import "wasmkeep:alarm" "get-alarm" (func $get_alarm (param i32) (result i32)))
  (import "wasmkeep:alarm" "clear-alarm" (func $clear_alarm (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "_initialize")
    (i32.store (i32.const 16) (call $set_alarm (i64.const 1000)))
    (i32.store (i32.const 20) (call $get_alarm (i32.const 0)))
    (i32.store (i32.const 24) (call $clear_alarm)))

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (i32.const 0))

  (func (export "on-request") (param $req_len i32) (result i32)
    (drop (call $response_write (i32.const 16) (i32.const 12)))
    (i32.const 0))
)
