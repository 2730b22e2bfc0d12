;; host_owned: a guest of a host that runs its own instances and databases
;; (hostmod.Table): it imports only wasmkeep:alarm, and the host calls its
;; exports directly.
;;   set(at i64, fails i32) -> errno: set-alarm(at); on-alarm then fails
;;     (returns 1) while its retry count is below fails
;;   clear() -> errno: clear-alarm()
;;   get(ptr i32) -> errno: get-alarm(ptr)
;;   loop(): loops forever
;;   on-alarm(scheduled i64, retry i32) -> i32: as set said; with fails of
;;     -1 (0xffffffff) it loops forever instead
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (import "wasmkeep:alarm" "get-alarm" (func $get_alarm (param i32) (result i32)))
  (import "wasmkeep:alarm" "clear-alarm" (func $clear_alarm (result i32)))
  (memory (export "memory") 1)
  (global $fails (mut i32) (i32.const 0))

  (func (export "set") (param $at i64) (param $fails i32) (result i32)
    (global.set $fails (local.get $fails))
    (call $set_alarm (local.get $at)))

  (func (export "clear") (result i32)
    (call $clear_alarm))

  (func (export "get") (param $ptr i32) (result i32)
    (call $get_alarm (local.get $ptr)))

  (func $loop (export "loop")
    (loop $l (br $l)))

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (if (i32.eq (global.get $fails) (i32.const -1))
      (then (call $loop)))
    (i32.lt_u (local.get $retry_count) (global.get $fails)))
)
