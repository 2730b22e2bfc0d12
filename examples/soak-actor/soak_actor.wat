;; soak-actor: the chaos soak's guest (cmd/soak). It keeps a ledger, in its
;; own committed state (the key "L" of its key/value table), of every event
;; that changed its alarm or that the soak asked it to note, in the order
;; they committed: one 40-byte record each, five i64 (little-endian):
;;
;;   kind  1 arm    a = alarm time  b = request id  c = now  d = alarm time
;;         2 clear  a = 0           b = request id  c = now  d = -1
;;         3 fire   a = scheduled   b = retry count c = now  d = next alarm, -1 for none
;;         4 note   a = 0           b = request id  c = now  d = -1
;;
;; A request is 40 bytes, five i64: op, at, id, interval_ms, fails.
;;   op 1 arm:   store (interval_ms, fails) as the actor's behaviour and set
;;               the alarm to at
;;   op 2 clear: clear the alarm
;;   op 3 note:  record the request, change nothing else
;;   op 4 get:   respond with the ledger
;; Anything else, or a short request, fails with 1.
;;
;; on-alarm first writes a line to stdout, "run <scheduled> <retry count>",
;; which the node logs with the actor's name as it is written, before the
;; run commits: so every run is seen from outside, even one whose commit
;; dies with its node. Then it fails (returns 1) while its retry count is
;; below `fails`; then it records the firing and, if interval_ms > 0, sets
;; the next alarm for now + interval_ms (otherwise the alarm is gone: a
;; one-shot).
;;
;; Build: wat2wasm soak_actor.wat -o soak_actor.wasm (make testdata does it).
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (import "wasmkeep:alarm" "clear-alarm" (func $clear_alarm (result i32)))
  (import "wasmkeep:actor" "request-read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "kv-get" (func $kv_get (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasmkeep:actor" "kv-put" (func $kv_put (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  ;; 4 pages: the ledger holds up to 6,500 records.
  (memory (export "memory") 4)

  ;; 100: key "L" (the ledger), 104: key "C" (interval_ms, fails)
  (data (i32.const 100) "L")
  (data (i32.const 104) "C")
  ;; 112: u32 value length from kv-get; 120: clock; 128..144: behaviour;
  ;; 200..240: the request; 300..380: the stdout line; 400..408: its iovec;
  ;; 416: bytes written; 1024..: the ledger.
  (data (i32.const 300) "run ")
  (global $ledger i32 (i32.const 1024))
  (global $cap i32 (i32.const 261120)) ;; 4*65536 - 1024

  (func $now (result i64)
    (if (call $clock_time_get (i32.const 0) (i64.const 1000000) (i32.const 120))
      (then unreachable))
    (i64.div_u (i64.load (i32.const 120)) (i64.const 1000000)))

  ;; utoa writes v in decimal at p and returns the end.
  (func $utoa (param $v i64) (param $p i32) (result i32)
    (local $t i64) (local $end i32) (local $q i32)
    (local.set $end (i32.add (local.get $p) (i32.const 1)))
    (local.set $t (i64.div_u (local.get $v) (i64.const 10)))
    (block $counted
      (loop $count
        (br_if $counted (i64.eqz (local.get $t)))
        (local.set $end (i32.add (local.get $end) (i32.const 1)))
        (local.set $t (i64.div_u (local.get $t) (i64.const 10)))
        (br $count)))
    (local.set $t (local.get $v))
    (local.set $q (local.get $end))
    (loop $digit
      (local.set $q (i32.sub (local.get $q) (i32.const 1)))
      (i32.store8 (local.get $q) (i32.add (i32.const 48) (i32.wrap_i64 (i64.rem_u (local.get $t) (i64.const 10)))))
      (local.set $t (i64.div_u (local.get $t) (i64.const 10)))
      (br_if $digit (i32.gt_u (local.get $q) (local.get $p))))
    (local.get $end))

  ;; say_run writes "run <scheduled> <retry>\n" to stdout (a failed write is
  ;; ignored: the line is for the soak's count, not the actor's state).
  (func $say_run (param $scheduled i64) (param $retry i32)
    (local $e i32)
    (local.set $e (call $utoa (local.get $scheduled) (i32.const 304)))
    (i32.store8 (local.get $e) (i32.const 32))
    (local.set $e (call $utoa (i64.extend_i32_u (local.get $retry)) (i32.add (local.get $e) (i32.const 1))))
    (i32.store8 (local.get $e) (i32.const 10))
    (i32.store (i32.const 400) (i32.const 300))
    (i32.store (i32.const 404) (i32.sub (i32.add (local.get $e) (i32.const 1)) (i32.const 300)))
    (drop (call $fd_write (i32.const 1) (i32.const 400) (i32.const 1) (i32.const 416))))

  ;; ledger_len reads the ledger into memory and returns its length.
  (func $ledger_len (result i32)
    (local $e i32)
    (local.set $e (call $kv_get (i32.const 100) (i32.const 1) (global.get $ledger) (global.get $cap) (i32.const 112)))
    (if (i32.eq (local.get $e) (i32.const 44)) (then (return (i32.const 0)))) ;; ENOENT
    (if (local.get $e) (then unreachable))
    (if (i32.gt_u (i32.load (i32.const 112)) (global.get $cap)) (then unreachable))
    (i32.load (i32.const 112)))

  ;; append adds a record to the ledger and stores it; returns the errno.
  (func $append (param $kind i64) (param $a i64) (param $b i64) (param $c i64) (param $d i64) (result i32)
    (local $n i32) (local $p i32)
    (local.set $n (call $ledger_len))
    (if (i32.gt_u (i32.add (local.get $n) (i32.const 40)) (global.get $cap)) (then unreachable))
    (local.set $p (i32.add (global.get $ledger) (local.get $n)))
    (i64.store (local.get $p) (local.get $kind))
    (i64.store offset=8 (local.get $p) (local.get $a))
    (i64.store offset=16 (local.get $p) (local.get $b))
    (i64.store offset=24 (local.get $p) (local.get $c))
    (i64.store offset=32 (local.get $p) (local.get $d))
    (call $kv_put (i32.const 100) (i32.const 1) (global.get $ledger) (i32.add (local.get $n) (i32.const 40))))

  (func (export "on-request") (param $len i32) (result i32)
    (local $op i64) (local $e i32)
    (if (i32.lt_u (local.get $len) (i32.const 40)) (then (return (i32.const 1))))
    (if (call $request_read (i32.const 200) (i32.const 40)) (then (return (i32.const 1))))
    (local.set $op (i64.load (i32.const 200)))
    (if (i64.eq (local.get $op) (i64.const 1))
      (then
        (local.set $e (call $kv_put (i32.const 104) (i32.const 1) (i32.const 224) (i32.const 16)))
        (if (local.get $e) (then (return (local.get $e))))
        (local.set $e (call $set_alarm (i64.load (i32.const 208))))
        (if (local.get $e) (then (return (local.get $e))))
        (return (call $append (i64.const 1) (i64.load (i32.const 208)) (i64.load (i32.const 216))
          (call $now) (i64.load (i32.const 208))))))
    (if (i64.eq (local.get $op) (i64.const 2))
      (then
        (local.set $e (call $clear_alarm))
        (if (local.get $e) (then (return (local.get $e))))
        (return (call $append (i64.const 2) (i64.const 0) (i64.load (i32.const 216)) (call $now) (i64.const -1)))))
    (if (i64.eq (local.get $op) (i64.const 3))
      (then
        (return (call $append (i64.const 4) (i64.const 0) (i64.load (i32.const 216)) (call $now) (i64.const -1)))))
    (if (i64.eq (local.get $op) (i64.const 4))
      (then
        (return (call $response_write (global.get $ledger) (call $ledger_len)))))
    (i32.const 1))

  (func (export "on-alarm") (param $scheduled i64) (param $retry i32) (result i32)
    (local $e i32) (local $now i64) (local $next i64)
    (call $say_run (local.get $scheduled) (local.get $retry))
    ;; the behaviour (zero if never armed: a one-shot that never fails)
    (i64.store (i32.const 128) (i64.const 0))
    (i64.store (i32.const 136) (i64.const 0))
    (local.set $e (call $kv_get (i32.const 104) (i32.const 1) (i32.const 128) (i32.const 16) (i32.const 112)))
    (if (i32.and (i32.ne (local.get $e) (i32.const 0)) (i32.ne (local.get $e) (i32.const 44)))
      (then (return (local.get $e))))
    (if (i64.lt_u (i64.extend_i32_u (local.get $retry)) (i64.load (i32.const 136)))
      (then (return (i32.const 1))))
    (local.set $now (call $now))
    (local.set $next (i64.const -1))
    (if (i64.gt_s (i64.load (i32.const 128)) (i64.const 0))
      (then
        (local.set $next (i64.add (local.get $now) (i64.load (i32.const 128))))
        (local.set $e (call $set_alarm (local.get $next)))
        (if (local.get $e) (then (return (local.get $e))))))
    (call $append (i64.const 3) (local.get $scheduled) (i64.extend_i32_u (local.get $retry))
      (local.get $now) (local.get $next)))
)
