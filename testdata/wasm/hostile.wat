;; hostile: a guest that misbehaves as the first byte of its request says
;; (the request's first 16 bytes are copied to memory at 0):
;;
;;   "l"           on-request loops forever (the event deadline stops it)
;;   "a" + i64 LE  set-alarm(at); responds with the errno (i32 LE)
;;   "w"           kv-put("k", "written"), set-alarm(12345), then traps
;;   "p" + u32 LE  kv-put("big", that many bytes of memory from 1024);
;;                 responds with the errno (i32 LE)
;;   anything else returns 0
;;
;; on-alarm loops forever (the alarm deadline stops it). Both loops write
;; to the last byte of memory on every turn, so a memory taken from a guest
;; still running would be found at once. The memory is 17 pages (1,114,112
;; bytes), room for a value one byte over abi.MaxValueLen.
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (import "wasmkeep:actor" "request-read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "kv-put" (func $kv_put (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 17)
  (data (i32.const 64) "k")
  (data (i32.const 72) "written")
  (data (i32.const 80) "big")

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (call $spin)
    (i32.const 0))

  ;; spin loops forever, counting in the last byte of memory.
  (func $spin
    (loop $forever
      (i32.store8 (i32.const 1114111) (i32.add (i32.load8_u (i32.const 1114111)) (i32.const 1)))
      (br $forever)))

  (func (export "on-request") (param $len i32) (result i32)
    (local $op i32)
    (if (i32.gt_u (local.get $len) (i32.const 16))
      (then (local.set $len (i32.const 16))))
    (drop (call $request_read (i32.const 0) (local.get $len)))
    (if (i32.eqz (local.get $len))
      (then (return (i32.const 0))))
    (local.set $op (i32.load8_u (i32.const 0)))
    (if (i32.eq (local.get $op) (i32.const 108)) ;; l
      (then (call $spin)))
    (if (i32.eq (local.get $op) (i32.const 97)) ;; a
      (then
        (i32.store (i32.const 32) (call $set_alarm (i64.load (i32.const 1))))
        (drop (call $response_write (i32.const 32) (i32.const 4)))
        (return (i32.const 0))))
    (if (i32.eq (local.get $op) (i32.const 119)) ;; w
      (then
        (drop (call $kv_put (i32.const 64) (i32.const 1) (i32.const 72) (i32.const 7)))
        (drop (call $set_alarm (i64.const 12345)))
        (unreachable)))
    (if (i32.eq (local.get $op) (i32.const 112)) ;; p
      (then
        (i32.store (i32.const 32) (call $kv_put (i32.const 80) (i32.const 3) (i32.const 1024) (i32.load (i32.const 1))))
        (drop (call $response_write (i32.const 32) (i32.const 4)))
        (return (i32.const 0))))
    (i32.const 0))
)
