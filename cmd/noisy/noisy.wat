;; noisy: the guest of cmd/noisy, one class for both tenants of the
;; noisy-neighbour run. A request's first byte is its op:
;;
;;   "A" at:i64 interval:i64 mode:u8   keep (interval, mode) in the key "M"
;;                                     and set the alarm to at (Unix ms)
;;   "R"                               read: respond with the 16 bytes of "M"
;;   "W" ...                           write: kv-put "W" = the request
;;   "G"                               respond with the ledger ("L")
;;   "C"                               clear the alarm
;;
;; Anything else fails the request. on-alarm does what the mode says:
;;
;;   "k"  an honest handler: append (scheduled, now) to the ledger, two
;;        i64 LE in ms, and set the next alarm for now + interval when the
;;        interval is above 0 (one firing otherwise)
;;   "s"  spin: loop forever in Wasm (the deadline stops it)
;;   "h"  hang: loop forever calling the host (clock_time_get), as a guest
;;        that waits on the host does
;;   "f"  fail at once (return 1): the committed backoff retries it
;;
;; Build: wat2wasm noisy.wat -o noisy.wasm (make testdata does it).
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (import "wasmkeep:alarm" "clear-alarm" (func $clear_alarm (result i32)))
  (import "wasmkeep:actor" "request-read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "kv-get" (func $kv_get (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasmkeep:actor" "kv-put" (func $kv_put (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
  ;; 0..64: the request; 64: "M", 66: "L", 68: "W"; 72: a value's length;
  ;; 80: the clock; 96..112: the config (interval i64, mode u8);
  ;; 1024..: the ledger, 16 bytes a firing.
  (memory (export "memory") 4)
  (data (i32.const 64) "M")
  (data (i32.const 66) "L")
  (data (i32.const 68) "W")
  (global $ledger i32 (i32.const 1024))
  (global $cap i32 (i32.const 261120)) ;; 4*65536 - 1024

  ;; now is the wall clock in ms.
  (func $now (result i64)
    (if (call $clock_time_get (i32.const 0) (i64.const 1000000) (i32.const 80))
      (then unreachable))
    (i64.div_u (i64.load (i32.const 80)) (i64.const 1000000)))

  (func (export "on-alarm") (param $scheduled i64) (param $retry i32) (result i32)
    (local $mode i32) (local $len i32) (local $now i64) (local $interval i64)
    (if (call $kv_get (i32.const 64) (i32.const 1) (i32.const 96) (i32.const 16) (i32.const 72))
      (then (return (i32.const 0))))
    (local.set $mode (i32.load8_u (i32.const 104)))
    (if (i32.eq (local.get $mode) (i32.const 115)) ;; s
      (then
        (loop $spin
          (i32.store8 (i32.const 262143) (i32.add (i32.load8_u (i32.const 262143)) (i32.const 1)))
          (br $spin))))
    (if (i32.eq (local.get $mode) (i32.const 104)) ;; h
      (then
        (loop $hang
          (drop (call $clock_time_get (i32.const 1) (i64.const 1) (i32.const 80)))
          (br $hang))))
    (if (i32.eq (local.get $mode) (i32.const 102)) ;; f
      (then (return (i32.const 1))))
    (local.set $now (call $now))
    (local.set $len (i32.const 0))
    (if (i32.eqz (call $kv_get (i32.const 66) (i32.const 1) (global.get $ledger) (global.get $cap) (i32.const 72)))
      (then (local.set $len (i32.load (i32.const 72)))))
    (if (i32.le_u (i32.add (local.get $len) (i32.const 16)) (global.get $cap))
      (then
        (i64.store (i32.add (global.get $ledger) (local.get $len)) (local.get $scheduled))
        (i64.store (i32.add (global.get $ledger) (i32.add (local.get $len) (i32.const 8))) (local.get $now))
        (if (call $kv_put (i32.const 66) (i32.const 1) (global.get $ledger) (i32.add (local.get $len) (i32.const 16)))
          (then (return (i32.const 1))))))
    (local.set $interval (i64.load (i32.const 96)))
    (if (i64.gt_s (local.get $interval) (i64.const 0))
      (then
        (if (call $set_alarm (i64.add (local.get $now) (local.get $interval)))
          (then (return (i32.const 1))))))
    (i32.const 0))

  (func (export "on-request") (param $len i32) (result i32)
    (local $op i32) (local $n i32)
    (local.set $n (local.get $len))
    (if (i32.gt_u (local.get $n) (i32.const 64))
      (then (local.set $n (i32.const 64))))
    (if (i32.eqz (local.get $n))
      (then (return (i32.const 1))))
    (drop (call $request_read (i32.const 0) (local.get $n)))
    (local.set $op (i32.load8_u (i32.const 0)))
    (if (i32.eq (local.get $op) (i32.const 65)) ;; A
      (then
        (if (i32.lt_u (local.get $n) (i32.const 18))
          (then (return (i32.const 1))))
        (i64.store (i32.const 96) (i64.load (i32.const 9)))
        (i64.store (i32.const 104) (i64.const 0))
        (i32.store8 (i32.const 104) (i32.load8_u (i32.const 17)))
        (if (call $kv_put (i32.const 64) (i32.const 1) (i32.const 96) (i32.const 16))
          (then (return (i32.const 1))))
        (return (call $set_alarm (i64.load (i32.const 1))))))
    (if (i32.eq (local.get $op) (i32.const 82)) ;; R
      (then
        (if (call $kv_get (i32.const 64) (i32.const 1) (i32.const 96) (i32.const 16) (i32.const 72))
          (then (return (i32.const 1))))
        (drop (call $response_write (i32.const 96) (i32.const 16)))
        (return (i32.const 0))))
    (if (i32.eq (local.get $op) (i32.const 87)) ;; W
      (then (return (call $kv_put (i32.const 68) (i32.const 1) (i32.const 0) (local.get $n)))))
    (if (i32.eq (local.get $op) (i32.const 71)) ;; G
      (then
        (if (call $kv_get (i32.const 66) (i32.const 1) (global.get $ledger) (global.get $cap) (i32.const 72))
          (then (return (i32.const 0))))
        (drop (call $response_write (global.get $ledger) (i32.load (i32.const 72))))
        (return (i32.const 0))))
    (if (i32.eq (local.get $op) (i32.const 67)) ;; C
      (then (return (call $clear_alarm))))
    (i32.const 1))
)
