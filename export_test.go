package alarms

import "github.com/wasmkeep/alarms/internal/variant"

// WithVariants returns cfg with the safety rules in v turned off, for tests
// that show a rule is needed.
func WithVariants(cfg Config, v variant.Set) Config {
	cfg.variants = v
	return cfg
}

// Workers returns how many delivery workers RunTimer has running.
func (p *Plugin) Workers() int { return int(p.workers.Load()) }
