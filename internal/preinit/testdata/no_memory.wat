;; No memory: only a global is captured, and no export section is there to
;; begin with (the start function is the initialisation).
(module
  (global $g (mut i64) (i64.const 0))
  (func $s (global.set $g (i64.const 12345)))
  (start $s))
