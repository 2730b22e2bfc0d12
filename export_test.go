package alarms

import "github.com/wasmkeep/alarms/alarmindex"

// WithMutations returns cfg with safety features of the rules and the
// executor switched off, for mutation tests only. It is not part of the
// public API.
func WithMutations(cfg Config, m alarmindex.Mutations) Config {
	cfg.mutations = m
	return cfg
}

// Workers returns how many delivery workers RunTimer has running.
func (p *Plugin) Workers() int { return int(p.workers.Load()) }
