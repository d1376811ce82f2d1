package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// frontendAddrs reads the frontend addresses from the "nemo ready" line.
func frontendAddrs(t *testing.T, p *proc) (azure, datastore string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(p.logs(), "\n") {
			var rec struct {
				Msg       string `json:"msg"`
				AzTable   string `json:"aztable"`
				Datastore string `json:"datastore"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "nemo ready" {
				return rec.AzTable, rec.Datastore
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no \"nemo ready\" line:\n%s", p.logs())
	return "", ""
}

// TestBinaryFrontendWritesSurviveSIGTERM is issue 5's end-to-end test over
// both real frontends: the aztables SDK and the Datastore REST API write
// through the running binary; SIGTERM drains; the embedded store then holds
// every acknowledged write, in both dialects' keyspaces.
func TestBinaryFrontendWritesSurviveSIGTERM(t *testing.T) {
	dataDir := t.TempDir()
	p := startNemo(t, dataDir)
	p.waitReady(t)
	_, dsAddr := frontendAddrs(t, p)
	ctx := context.Background()

	// Azure Table, through the real SDK with Azurite's well-known key.
	svc := nemoClient(t, p)
	if _, err := svc.CreateTable(ctx, "e2e", nil); err != nil {
		t.Fatalf("create table: %v", err)
	}
	tc := svc.NewClient("e2e")
	const azRows = 25
	for i := 0; i < azRows; i++ {
		e, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprintf("r%02d", i), "N": i})
		if _, err := tc.AddEntity(ctx, e, nil); err != nil {
			t.Fatalf("add entity %d: %v", i, err)
		}
	}

	// Datastore, through the REST API.
	const dsEntities = 15
	var muts []map[string]any
	for i := 1; i <= dsEntities; i++ {
		muts = append(muts, map[string]any{"upsert": map[string]any{
			"key":        map[string]any{"path": []map[string]any{{"kind": "K", "id": fmt.Sprint(i)}}},
			"properties": map[string]any{"n": map[string]any{"integerValue": fmt.Sprint(i)}},
		}})
	}
	body, _ := json.Marshal(map[string]any{"mode": "NON_TRANSACTIONAL", "mutations": muts})
	resp, err := http.Post("http://"+dsAddr+"/v1/projects/e2e-project:commit", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("datastore commit: %s", resp.Status)
	}

	drain(t, p)
	checkReopened(t, dataDir)

	s := openStore(t, dataDir)
	spaces, err := s.Keyspaces()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[adapters.Keyspace]int{}
	for _, ks := range spaces {
		recs, _, err := s.GetRange(ctx, ks, nil, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		counts[ks] = len(recs)
	}
	if counts["e2e"] != azRows {
		t.Errorf("Azure table in the store: %d rows, want %d (keyspaces %v)", counts["e2e"], azRows, counts)
	}
	ds := 0
	for ks, n := range counts {
		if regexp.MustCompile(`^datastore/e2e-project/`).MatchString(string(ks)) {
			ds += n
		}
	}
	if ds != dsEntities {
		t.Errorf("Datastore entities in the store: %d, want %d (keyspaces %v)", ds, dsEntities, counts)
	}
}
