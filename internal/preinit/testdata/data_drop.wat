;; Active segments only, but data.drop in the code.
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "x")
  (func (export "_initialize") (data.drop 0)))
