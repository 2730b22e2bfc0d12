package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Every query of the Grafana dashboard is PromQL that Prometheus parses
// (promtool checks them as recording rules, with the dashboard's variables
// given values), with the promtool of the Prometheus release the compose
// file runs (build/promtool, which make promtool builds), or else one on
// PATH. Without either the test is skipped, unless
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
	promtool, err := filepath.Abs("../../build/promtool")
	if _, serr := os.Stat(promtool); err != nil || serr != nil {
		promtool, err = exec.LookPath("promtool")
	}
	if err != nil {
		if os.Getenv("WASMKEEP_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("promtool not found: make promtool builds the one of the Prometheus release deploy/compose.yaml runs")
		}
		t.Skip("promtool not found (make promtool builds it)")
	}
	t.Logf("promtool: %s", promtool)
	b, _ := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	file := filepath.Join(t.TempDir(), "dashboard-rules.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}

// The promtool that checks the alert rules and the dashboard
// (deploy/prometheus/promtool) is the one of the Prometheus release the
// compose file runs: Prometheus v3.M.P is its module's version v0.3MM.P.
// Prometheus 3 reads some PromQL and labels differently from 2 (a
// histogram's le="60" is "60.0" once scraped), so rules that pass an older
// promtool can fail to fire in the Prometheus operators run.
func TestPromtoolIsTheRelease(t *testing.T) {
	image := regexp.MustCompile(`image: prom/prometheus:v3\.(\d+)\.(\d+)\n`).FindStringSubmatch(deployFile(t, "compose.yaml"))
	if image == nil {
		t.Fatal("deploy/compose.yaml: no image prom/prometheus:v3.M.P")
	}
	mod := regexp.MustCompile(`\n\tgithub\.com/prometheus/prometheus v0\.3(\d\d)\.(\d+)[ \n]`).FindStringSubmatch(deployFile(t, "prometheus/promtool/go.mod"))
	if mod == nil {
		t.Fatal("deploy/prometheus/promtool/go.mod: no requirement of github.com/prometheus/prometheus v0.3MM.P")
	}
	minor, _ := strconv.Atoi(mod[1])
	if strconv.Itoa(minor) != image[1] || mod[2] != image[2] {
		t.Errorf("compose runs Prometheus v3.%s.%s, but promtool is built from v0.3%s.%s (Prometheus v3.%d.%s): keep them the same release",
			image[1], image[2], mod[1], mod[2], minor, mod[2])
	}
}
