;; A passive segment, copied by memory.init.
(module
  (memory (export "memory") 1)
  (data $p "later")
  (func (export "_initialize"))
  (func (export "copy") (memory.init $p (i32.const 0) (i32.const 0) (i32.const 5))))
