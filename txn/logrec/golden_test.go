package logrec_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nemocache/nemo/txn/logrec"
	"github.com/nemocache/nemo/wal"
)

// The WAL's golden logs (../../wal/testdata), written by nemo at commit
// e667273, before this format moved out of package wal, and what that
// nemo replayed them to (the *.txt listings next to them, written by the
// same code).
var goldenLogs = []struct {
	listing string
	files   []string
}{
	{"../../wal/testdata/golden/records.txt", []string{"0000000000000001.wal", "0000000000000019.wal", "000000000000001c.wal"}},
	{"../../wal/testdata/golden/golden.records.txt", []string{"../golden.wal"}},
	{"../../wal/testdata/golden/golden-expect.records.txt", []string{"../golden-expect.wal"}},
}

// recordLine is how the listings show one replayed record.
func recordLine(txnID, commitLSN uint64, r logrec.Record) string {
	return fmt.Sprintf("txn=%d commit=%d type=%s ks=%q key=%q value=%q expect=%s version=%q prior=%#x digest=%#x",
		txnID, commitLSN, r.Type, r.Keyspace, r.Key, r.Value, r.ExpectKind, r.ExpectVersion, r.Prior, r.Digest)
}

// TestGoldenWAL replays each golden log through package wal, decodes its
// records here, and checks that they are exactly the records the listing
// names, and that each encodes back to the very type byte and body the
// log holds.
func TestGoldenWAL(t *testing.T) {
	for _, g := range goldenLogs {
		t.Run(filepath.Base(g.listing), func(t *testing.T) {
			dir := t.TempDir()
			for i, name := range g.files {
				b, err := os.ReadFile(filepath.Join("../../wal/testdata/golden", name))
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(name, "../") {
					if i != 0 {
						t.Fatal("one old golden segment only")
					}
					name = "0000000000000001.wal"
				}
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			l, err := wal.Open(wal.Options{Dir: dir, SegmentSize: 4 << 10})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var got []string
			var commits []uint64
			types := map[byte]int{}
			err = l.Replay(1, func(txnID uint64, data []wal.Data) error {
				commits = append(commits, txnID)
				for i, d := range data {
					r, err := logrec.Decode(d.Type, d.Body)
					if err != nil {
						return fmt.Errorf("txn %d record %d: %w", txnID, i, err)
					}
					if typ, body := r.WireType(), r.AppendBody(nil); typ != d.Type || !bytes.Equal(body, d.Body) {
						return fmt.Errorf("txn %d record %d (%x %x) re-encodes to %x %x", txnID, i, d.Type, d.Body, typ, body)
					}
					types[d.Type]++
					got = append(got, recordLine(txnID, 0, r))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(g.listing)
			if err != nil {
				t.Fatal(err)
			}
			var wantLines []string
			for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
				if !strings.HasPrefix(line, "txn=") {
					continue // the WAL's own tests check commits and checkpoints
				}
				// Commit LSNs are package wal's to check (its golden
				// tests read the same listing); Replay does not tell them.
				pre, rest, _ := strings.Cut(line, " commit=")
				_, rest, _ = strings.Cut(rest, " ")
				wantLines = append(wantLines, pre+" commit=0 "+rest)
			}
			if len(got) != len(wantLines) {
				t.Fatalf("replayed %d records, the listing has %d", len(got), len(wantLines))
			}
			for i := range got {
				if got[i] != wantLines[i] {
					t.Fatalf("record %d:\n got  %s\n want %s", i, got[i], wantLines[i])
				}
			}
			t.Logf("%d commits, %d records, type bytes %v", len(commits), len(got), types)
		})
	}
}
