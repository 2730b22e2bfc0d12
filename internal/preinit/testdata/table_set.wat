;; _initialize changes the table.
(module
  (table 2 funcref)
  (memory (export "memory") 1)
  (func $a (result i32) (i32.const 1))
  (elem declare func $a)
  (func (export "_initialize") (table.set 0 (i32.const 1) (ref.func $a)))
  (func (export "call1") (result i32) (call_indirect (result i32) (i32.const 1))))
