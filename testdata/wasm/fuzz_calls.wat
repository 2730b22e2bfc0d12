;; fuzz_calls: on-request runs its request as a program that calls the
;; host functions with whatever arguments the program holds. The request is
;; first copied to memory at 0 (request-read), so a pointer can name any part
;; of it (a key, a value), then read as 21-byte records: an op byte and five
;; u32 arguments a0..a4, little-endian. A record that does not fit is ignored.
;;
;;   op % 12   does
;;   0         set-alarm(a0 | a1 << 32)
;;   1         get-alarm(a0)
;;   2         clear-alarm()
;;   3         request-read(a0, a1)
;;   4         response-write(a0, a1)
;;   5         kv-get(a0, a1, a2, a3, a4)
;;   6         kv-put(a0, a1, a2, a3)
;;   7         kv-delete(a0, a1)
;;   8         i32.store a1 at a0 (the guest's own write; skipped outside memory)
;;   9         return 1 (the event fails)
;;   10        unreachable (the event traps)
;;   11        memory.grow(a0 % 4) while memory is under 2 pages (so at most 4)
;;
;; Errnos are dropped: the test watches each host call from the host's side.
;; on-alarm returns 0.
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set_alarm (param i64) (result i32)))
  (import "wasmkeep:alarm" "get-alarm" (func $get_alarm (param i32) (result i32)))
  (import "wasmkeep:alarm" "clear-alarm" (func $clear_alarm (result i32)))
  (import "wasmkeep:actor" "request-read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "response-write" (func $response_write (param i32 i32) (result i32)))
  (import "wasmkeep:actor" "kv-get" (func $kv_get (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasmkeep:actor" "kv-put" (func $kv_put (param i32 i32 i32 i32) (result i32)))
  (import "wasmkeep:actor" "kv-delete" (func $kv_delete (param i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "on-alarm") (param $scheduled_ms i64) (param $retry_count i32) (result i32)
    (i32.const 0))

  ;; $arg returns argument i of the record at pc.
  (func $arg (param $pc i32) (param $i i32) (result i32)
    (i32.load offset=1 (i32.add (local.get $pc) (i32.shl (local.get $i) (i32.const 2)))))

  (func (export "on-request") (param $len i32) (result i32)
    (local $pc i32)
    (if (i32.gt_u (local.get $len) (i32.const 65536))
      (then (return (i32.const 2))))
    (if (call $request_read (i32.const 0) (local.get $len))
      (then (return (i32.const 3))))
    (block $done
      (loop $next
        (br_if $done (i32.gt_u (i32.add (local.get $pc) (i32.const 21)) (local.get $len)))
        (block $cont
          (block $b11 (block $b10 (block $b9 (block $b8 (block $b7 (block $b6
          (block $b5 (block $b4 (block $b3 (block $b2 (block $b1 (block $b0
            (br_table $b0 $b1 $b2 $b3 $b4 $b5 $b6 $b7 $b8 $b9 $b10 $b11
              (i32.rem_u (i32.load8_u (local.get $pc)) (i32.const 12))))
          ;; 0 set-alarm
          (drop (call $set_alarm (i64.load offset=1 (local.get $pc))))
          (br $cont))
          ;; 1 get-alarm
          (drop (call $get_alarm (call $arg (local.get $pc) (i32.const 0))))
          (br $cont))
          ;; 2 clear-alarm
          (drop (call $clear_alarm))
          (br $cont))
          ;; 3 request-read
          (drop (call $request_read (call $arg (local.get $pc) (i32.const 0)) (call $arg (local.get $pc) (i32.const 1))))
          (br $cont))
          ;; 4 response-write
          (drop (call $response_write (call $arg (local.get $pc) (i32.const 0)) (call $arg (local.get $pc) (i32.const 1))))
          (br $cont))
          ;; 5 kv-get
          (drop (call $kv_get (call $arg (local.get $pc) (i32.const 0)) (call $arg (local.get $pc) (i32.const 1))
                              (call $arg (local.get $pc) (i32.const 2)) (call $arg (local.get $pc) (i32.const 3))
                              (call $arg (local.get $pc) (i32.const 4))))
          (br $cont))
          ;; 6 kv-put
          (drop (call $kv_put (call $arg (local.get $pc) (i32.const 0)) (call $arg (local.get $pc) (i32.const 1))
                              (call $arg (local.get $pc) (i32.const 2)) (call $arg (local.get $pc) (i32.const 3))))
          (br $cont))
          ;; 7 kv-delete
          (drop (call $kv_delete (call $arg (local.get $pc) (i32.const 0)) (call $arg (local.get $pc) (i32.const 1))))
          (br $cont))
          ;; 8 the guest's own store
          (if (i32.le_u (call $arg (local.get $pc) (i32.const 0))
                        (i32.sub (i32.shl (memory.size) (i32.const 16)) (i32.const 4)))
            (then (i32.store (call $arg (local.get $pc) (i32.const 0)) (call $arg (local.get $pc) (i32.const 1)))))
          (br $cont))
          ;; 9 fail
          (return (i32.const 1)))
          ;; 10 trap
          (unreachable))
          ;; 11 grow
          (if (i32.lt_u (memory.size) (i32.const 2))
            (then (drop (memory.grow (i32.rem_u (call $arg (local.get $pc) (i32.const 0)) (i32.const 4)))))))
        (local.set $pc (i32.add (local.get $pc) (i32.const 21)))
        (br $next)))
    (i32.const 0))
)
