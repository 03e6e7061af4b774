package main

import (
	"strings"
	"testing"
	"time"
)

// A bad retention in the environment stops serve with the variable's name,
// unless the flag overrides it; the flag's value is the one used.
func TestRetentionFromTheEnvironmentAndTheFlag(t *testing.T) {
	t.Setenv("GEOHUB_DEAD_LETTER_RETENTION", "trinta dias")
	if _, _, err := serveConfig(nil); err == nil || !strings.Contains(err.Error(), "GEOHUB_DEAD_LETTER_RETENTION") {
		t.Fatalf("a bad environment value: %v", err)
	}
	cfg, run, err := serveConfig([]string{"--dead-letter-retention", "240h"})
	if err != nil || !run || cfg.DeadLetterRetention != 240*time.Hour {
		t.Fatalf("the flag over a bad environment value: %v, %v, %v", cfg.DeadLetterRetention, run, err)
	}
	t.Setenv("GEOHUB_DEAD_LETTER_RETENTION", "48h")
	if cfg, _, err := serveConfig(nil); err != nil || cfg.DeadLetterRetention != 48*time.Hour || cfg.DeliveredRetention != 7*24*time.Hour {
		t.Fatalf("from the environment: %v, %v (delivered %v)", cfg.DeadLetterRetention, err, cfg.DeliveredRetention)
	}
	if _, _, err := serveConfig([]string{"--delivered-retention", "-1h"}); err == nil {
		t.Fatal("a negative retention was accepted")
	}
}

// The per-integrator in-flight bound, from the environment or the flag:
// with replicas an operator divides it among them (issue 27).
func TestPerIntegratorInFlightFromTheEnvironmentAndTheFlag(t *testing.T) {
	if cfg, _, err := serveConfig(nil); err != nil || cfg.PerIntegrator != 16 {
		t.Fatalf("default: %d %v", cfg.PerIntegrator, err)
	}
	t.Setenv("GEOHUB_PER_INTEGRATOR_IN_FLIGHT", "dezesseis")
	if _, _, err := serveConfig(nil); err == nil || !strings.Contains(err.Error(), "GEOHUB_PER_INTEGRATOR_IN_FLIGHT") {
		t.Fatalf("a bad environment value: %v", err)
	}
	if cfg, _, err := serveConfig([]string{"--per-integrator-in-flight", "5"}); err != nil || cfg.PerIntegrator != 5 {
		t.Fatalf("the flag over a bad environment value: %d %v", cfg.PerIntegrator, err)
	}
	t.Setenv("GEOHUB_PER_INTEGRATOR_IN_FLIGHT", "6")
	if cfg, _, err := serveConfig(nil); err != nil || cfg.PerIntegrator != 6 {
		t.Fatalf("from the environment: %d %v", cfg.PerIntegrator, err)
	}
	for _, bad := range []string{"0", "33", "-1"} {
		if _, _, err := serveConfig([]string{"--per-integrator-in-flight", bad}); err == nil {
			t.Errorf("--per-integrator-in-flight %s was accepted", bad)
		}
	}
}
