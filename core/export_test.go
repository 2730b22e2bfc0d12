package core

// ForwardedLen is how many forward records the State keeps (tests).
func (s *State) ForwardedLen() int { return len(s.forwarded) }

// RanLen is how many run records the State keeps (tests).
func (s *State) RanLen() int { return len(s.ran) }
