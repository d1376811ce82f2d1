package peer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/txn"
)

// TestPlan: the move of one round, by the rule of rebalance.go.
func TestPlan(t *testing.T) {
	owned := func(names ...string) []txn.Owned {
		var out []txn.Owned
		for _, n := range names {
			out = append(out, txn.Owned{Keyspace: adapters.Keyspace(n), LastSeq: 10})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		owned  []txn.Owned
		seen   map[adapters.Keyspace]uint64
		loads  map[string]int
		wantKS adapters.Keyspace
		wantTo string
	}{
		{name: "no peers", owned: owned("a", "b", "c")},
		{name: "nothing owned", loads: map[string]int{"p:1": 0}},
		{name: "even", owned: owned("a", "b"), loads: map[string]int{"p:1": 2}},
		{name: "one more is fair", owned: owned("a", "b"), loads: map[string]int{"p:1": 1}},
		{name: "two more", owned: owned("a", "b"), loads: map[string]int{"p:1": 0}, wantKS: "a", wantTo: "p:1"},
		{name: "least loaded peer, then by address", owned: owned("a", "b", "c", "d"),
			loads: map[string]int{"p:3": 1, "p:2": 0, "p:1": 0}, wantKS: "a", wantTo: "p:1"},
		{name: "within the fair share", owned: owned("a", "b", "c"), loads: map[string]int{"p:1": 2, "p:2": 2}},
		{name: "over the fair share", owned: owned("a", "b", "c"), loads: map[string]int{"p:1": 3, "p:2": 0}, wantKS: "a", wantTo: "p:2"},
		{name: "coldest since the last round", owned: []txn.Owned{{Keyspace: "a", LastSeq: 50}, {Keyspace: "b", LastSeq: 90}, {Keyspace: "c", LastSeq: 12}},
			seen: map[adapters.Keyspace]uint64{"a": 10, "b": 89, "c": 2}, loads: map[string]int{"p:1": 0}, wantKS: "b", wantTo: "p:1"},
		{name: "one not in use first", owned: []txn.Owned{{Keyspace: "a", InUse: 1}, {Keyspace: "b", InUse: 2, LastSeq: 5}, {Keyspace: "c", LastSeq: 9}},
			loads: map[string]int{"p:1": 0}, wantKS: "c", wantTo: "p:1"},
		{name: "a log reopened lower counts as cold", owned: []txn.Owned{{Keyspace: "a", LastSeq: 3}, {Keyspace: "b", LastSeq: 4}, {Keyspace: "c", LastSeq: 5}},
			seen: map[adapters.Keyspace]uint64{"a": 100, "b": 0, "c": 0}, loads: map[string]int{"p:1": 0}, wantKS: "a", wantTo: "p:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := tc.seen
			if seen == nil {
				seen = map[adapters.Keyspace]uint64{}
			}
			ks, to := plan(tc.owned, seen, tc.loads)
			if ks != tc.wantKS || to != tc.wantTo {
				t.Fatalf("plan: %q to %q, want %q to %q", ks, to, tc.wantKS, tc.wantTo)
			}
		})
	}
}

// TestPeersResolved: coherence.peers' names stand for every address they
// resolve to, this node's own left out, each once; a name that does not
// resolve is skipped.
func TestPeersResolved(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	c := NewClient(Options{Self: "10.0.0.1:7946", Logger: quiet})
	r := &rebalancer{c: c, log: quiet, o: RebalanceOptions{
		Peers:    []string{"nemo-peers:7946", "10.0.0.9:7946", "gone:7946", "10.0.0.2:7946"},
		Interval: time.Second,
		Resolve: func(_ context.Context, host string) ([]string, error) {
			if host == "nemo-peers" {
				return []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, nil
			}
			return nil, errors.New("no such host")
		},
	}}
	got := r.peers(context.Background())
	want := []string{"10.0.0.2:7946", "10.0.0.3:7946", "10.0.0.9:7946"}
	if !slices.Equal(got, want) {
		t.Fatalf("peers %v, want %v", got, want)
	}
}
