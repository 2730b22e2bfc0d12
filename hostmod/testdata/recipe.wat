;; recipe: the guest of hostmod's Example (example_test.go). It imports only
;; set-alarm.
;;   _initialize: calls set-alarm(1000), outside any event, and keeps the
;;     errno (EPERM, 63) at memory 0
;;   init-errno() -> i32: that errno
;;   schedule(at i64) -> errno: set-alarm(at)
;;   on-alarm(scheduled i64, retry i32) -> i32: returns 0, so the alarm
;;     fires once
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (memory (export "memory") 1)

  (func (export "_initialize")
    (i32.store (i32.const 0) (call $set_alarm (i64.const 1000))))

  (func (export "init-errno") (result i32)
    (i32.load (i32.const 0)))

  (func (export "schedule") (param $at i64) (result i32)
    (call $set_alarm (local.get $at)))

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (i32.const 0))
)
