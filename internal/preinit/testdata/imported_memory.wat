;; The memory is the host's.
(module
  (import "env" "memory" (memory 1))
  (func (export "_initialize")))
