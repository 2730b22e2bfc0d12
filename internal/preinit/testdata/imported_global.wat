;; A mutable global is the host's.
(module
  (import "env" "g" (global (mut i32)))
  (memory 1)
  (func (export "_initialize") (global.set 0 (i32.const 1))))
