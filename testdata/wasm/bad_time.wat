;; bad_time: set-alarm at the edges of its range. on-request writes four i32
;; LE errnos as the response, in this order:
;;   set-alarm(-1)                 before 1970: EINVAL
;;   set-alarm(1000000000000000)   past abi.MaxAlarmMillis: EINVAL
;;   set-alarm(999999999999999)    abi.MaxAlarmMillis itself: 0
;;   set-alarm(7000)               0, and the alarm the event commits
;; Returns 0.
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (i32.const 0))

  (func (export "on-request") (param $req_len i32) (result i32)
    (i32.store (i32.const 0) (call $set_alarm (i64.const -1)))
    (i32.store (i32.const 4) (call $set_alarm (i64.const 1000000000000000)))
    (i32.store (i32.const 8) (call $set_alarm (i64.const 999999999999999)))
    (i32.store (i32.const 12) (call $set_alarm (i64.const 7000)))
    (drop (call $response_write (i32.const 0) (i32.const 16)))
    (i32.const 0))
)
