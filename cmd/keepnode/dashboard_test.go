package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every query of the Grafana dashboard is PromQL that Prometheus parses
// (promtool checks them as recording rules, with the dashboard's variables
// given values). Without promtool the test is skipped, unless
// WASMKEEP_REQUIRE_PROMTOOL=1 (CI) makes that a failure.
func TestDashboardQueriesParse(t *testing.T) {
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(deployFile(t, "grafana/wasmkeep.json")), &dash); err != nil {
		t.Fatalf("deploy/grafana/wasmkeep.json: %v", err)
	}
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$instance", ".*")
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if !strings.Contains(q.Expr, "wasmkeep_") {
				t.Errorf("panel %q: query %q reads no wasmkeep_ metric", p.Title, q.Expr)
			}
			rules = append(rules, rule{Record: "dashboard:query", Expr: vars.Replace(q.Expr)})
		}
	}
	if dash.UID == "" || len(rules) < 10 {
		t.Fatalf("dashboard uid %q with %d queries", dash.UID, len(rules))
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("WASMKEEP_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("promtool not found (Debian: apt-get install prometheus)")
		}
		t.Skip("promtool not found")
	}
	b, _ := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	file := filepath.Join(t.TempDir(), "dashboard-rules.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}
