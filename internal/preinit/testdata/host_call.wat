;; _initialize calls a wasmkeep import.
(module
  (import "wasmkeep:alarm" "set-alarm" (func $set (param i64) (result i32)))
  (memory (export "memory") 1)
  (func (export "_initialize") (drop (call $set (i64.const 1000))))
  (func (export "on-alarm") (param i64 i32) (result i32) (i32.const 0)))
