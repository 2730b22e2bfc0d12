;; Two memories.
(module
  (memory 1)
  (memory 1)
  (func (export "_initialize")))
