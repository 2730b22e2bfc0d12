package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/node"
)

// The per-tenant settings come from the config file like any flag: a value
// for every tenant and values for single tenants, which become the node's
// weights and admission limits; every tenant they name has its own
// metrics' series.
func TestTenantSettingsFromTheConfigFile(t *testing.T) {
	file := writeConfig(t, `
tenant-weight = "acme=3"
tenant-rate = ["50", "acme=500", "free=5"]
tenant-burst = "free=10"
tenant-concurrency = "32,acme=128"
workers = 200
alarm-deadline = "5s,batch=1m"
`)
	o, err := parse(t, []string{"-config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := o.tenant.weights(), map[string]int{"acme": 3, "free": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("weights %v, want %v", got, want)
	}
	want := node.Admission{
		Default: node.TenantLimits{Rate: 50, Concurrency: 32},
		Tenants: map[string]node.TenantLimits{
			"acme": {Rate: 500, Concurrency: 128},
			"free": {Rate: 5, Burst: 10, Concurrency: 32},
		},
	}
	if got := o.tenant.admission(); !reflect.DeepEqual(got, want) {
		t.Errorf("admission %+v, want %+v", got, want)
	}
	if o.workers != 200 {
		t.Errorf("workers %d, want 200", o.workers)
	}
	if o.alarmDeadline.all != 5*time.Second || o.alarmDeadline.classes["batch"] != time.Minute {
		t.Errorf("alarm deadline %v, want 5s and batch=1m", o.alarmDeadline)
	}
}

// A per-tenant value that makes no sense is refused, naming the key.
func TestBadTenantSettingsAreRefused(t *testing.T) {
	for _, text := range []string{`tenant-weight = "acme=0"`, `tenant-rate = "-1"`, `tenant-concurrency = "acme=x"`, `alarm-deadline = "batch=0s"`} {
		_, err := parse(t, []string{"-config", writeConfig(t, text)}, nil)
		key, _, _ := strings.Cut(text, " ")
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v, want an error naming %s", text, err, key)
		}
	}
}
