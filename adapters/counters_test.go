package adapters

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeStore answers from fixed data so the counters' arithmetic can be
// checked by hand.
type fakeStore struct {
	vals map[string][]byte
	recs []Record
	err  error
}

func (f *fakeStore) Get(_ context.Context, _ Keyspace, keys [][]byte) ([]Record, error) {
	out := make([]Record, len(keys))
	for i, k := range keys {
		out[i] = Record{Key: k, Value: f.vals[string(k)]}
	}
	return out, f.err
}

func (f *fakeStore) GetRange(context.Context, Keyspace, []byte, []byte, int) ([]Record, bool, error) {
	return f.recs, false, f.err
}

func (f *fakeStore) Upsert(_ context.Context, _ Keyspace, ws []Write) ([]Version, error) {
	return make([]Version, len(ws)), f.err
}
func (f *fakeStore) Delete(context.Context, Keyspace, []Write) error { return f.err }

func TestOpString(t *testing.T) {
	want := map[Op]string{OpGet: "get", OpGetRange: "get_range", OpUpsert: "upsert", OpDelete: "delete", numOps: "unknown", -1: "unknown"}
	for op, s := range want {
		if got := op.String(); got != s {
			t.Errorf("Op(%d).String() = %q, want %q", int(op), got, s)
		}
	}
}

func TestCountedCounts(t *testing.T) {
	ctx := context.Background()
	f := &fakeStore{
		vals: map[string][]byte{"a": []byte("xyz"), "e": {}},
		recs: []Record{{Key: []byte("k1"), Value: []byte("v1")}, {Key: []byte("k22"), Value: nil}},
	}
	c := Count(f)
	if c.Unwrap() != Store(f) {
		t.Fatal("Unwrap did not return the inner store")
	}

	// Get: 3 keys (3 bytes), 2 found ("xyz" and the empty value), 3 value bytes.
	if _, err := c.Get(ctx, "t", [][]byte{[]byte("a"), []byte("b"), []byte("e")}); err != nil {
		t.Fatal(err)
	}
	// GetRange: bounds "aa".."zzz" = 5 bytes sent, 2 records with 4+3 bytes.
	if _, _, err := c.GetRange(ctx, "t", []byte("aa"), []byte("zzz"), 0); err != nil {
		t.Fatal(err)
	}
	// Upsert: 2 records, 1+3 + 2+0 bytes.
	if _, err := c.Upsert(ctx, "t", Puts([]Record{{Key: []byte("k"), Value: []byte("val")}, {Key: []byte("kk")}})); err != nil {
		t.Fatal(err)
	}
	// Delete: 2 keys, 1+4 bytes; then a failing Delete of 1 key.
	if err := c.Delete(ctx, "t", []Write{{Key: []byte("a")}, {Key: []byte("bbbb")}}); err != nil {
		t.Fatal(err)
	}
	f.err = ErrUnavailable
	if err := c.Delete(ctx, "t", []Write{{Key: []byte("c")}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error not passed through: %v", err)
	}
	if _, err := c.Upsert(ctx, "t", Puts([]Record{{Key: []byte("z"), Value: []byte("1")}})); err == nil {
		t.Fatal("error not passed through")
	}

	got := c.Stats()
	want := Stats{
		OpGet:      {Requests: 1, Keys: 3, Records: 2, BytesSent: 3, BytesReceived: 3},
		OpGetRange: {Requests: 1, Records: 2, BytesSent: 5, BytesReceived: 7},
		OpUpsert:   {Requests: 2, Records: 2, BytesSent: 6 + 2, Errors: 1},
		OpDelete:   {Requests: 2, Keys: 3, BytesSent: 6, Errors: 1},
	}
	if got != want {
		t.Fatalf("Stats() =\n%+v\nwant\n%+v", got, want)
	}
	wantTotal := OpStats{Requests: 6, Keys: 6, Records: 6, BytesSent: 22, BytesReceived: 10, Errors: 2}
	if tot := got.Total(); tot != wantTotal {
		t.Fatalf("Total() = %+v, want %+v", tot, wantTotal)
	}

	c.Reset()
	if s := c.Stats(); s != (Stats{}) {
		t.Fatalf("after Reset: %+v", s)
	}
}

func TestCountedConcurrent(t *testing.T) {
	c := Count(&fakeStore{vals: map[string][]byte{"k": []byte("vv")}})
	const workers, calls = 8, 500
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range calls {
				_, _ = c.Get(context.Background(), "t", [][]byte{[]byte("k")})
			}
		})
	}
	wg.Wait()
	s := c.Stats()[OpGet]
	want := OpStats{Requests: workers * calls, Keys: workers * calls, Records: workers * calls, BytesSent: workers * calls, BytesReceived: 2 * workers * calls}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
}

// atomicFake is a fakeStore that also writes atomically.
type atomicFake struct {
	fakeStore
	got []Mutation
}

func (f *atomicFake) WriteAtomic(_ context.Context, _ Keyspace, ms []Mutation) ([]Version, error) {
	f.got = ms
	return make([]Version, len(ms)), f.err
}

func (f *atomicFake) Stamped(value []byte, v Version) ([]byte, error) {
	return append(append([]byte{}, value...), v...), nil
}

func TestCountedWriteAtomic(t *testing.T) {
	ctx := context.Background()
	if OpWriteAtomic.String() != "write_atomic" {
		t.Fatalf("OpWriteAtomic.String() = %q", OpWriteAtomic.String())
	}
	ms := []Mutation{
		{Write: Write{Key: []byte("k"), Value: []byte("val")}},
		{Write: Write{Key: []byte("dd")}, Delete: true},
	}
	f := &atomicFake{}
	c := Count(f)
	if _, err := c.WriteAtomic(ctx, "t", ms); err != nil {
		t.Fatal(err)
	}
	if len(f.got) != 2 {
		t.Fatalf("inner store got %d mutations", len(f.got))
	}
	f.err = ErrConflict
	if _, err := c.WriteAtomic(ctx, "t", ms[:1]); !errors.Is(err, ErrConflict) {
		t.Fatalf("error not passed through: %v", err)
	}
	// 3 mutations, 2 applied; 1+3 + 2 + 1+3 bytes.
	want := OpStats{Requests: 2, Keys: 3, Records: 2, BytesSent: 10, Errors: 1}
	if got := c.Stats()[OpWriteAtomic]; got != want {
		t.Fatalf("write_atomic stats %+v, want %+v", got, want)
	}
	if v, err := c.Stamped([]byte("a"), "1"); err != nil || string(v) != "a1" {
		t.Fatalf("Stamped = %q, %v", v, err)
	}

	// A store without atomic writes or stamps: ErrUnsupported.
	plain := Count(&fakeStore{})
	if _, err := plain.WriteAtomic(ctx, "t", ms); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("WriteAtomic on a plain store: %v", err)
	}
	if _, err := plain.Stamped([]byte("a"), "1"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Stamped on a plain store: %v", err)
	}
	if s := plain.Stats()[OpWriteAtomic]; s.Requests != 1 || s.Errors != 1 || s.Records != 0 {
		t.Fatalf("unsupported call counted as %+v", s)
	}
}

// serviceErr is a backend's answer, as adapters wrap one.
type serviceErr struct{ code, msg string }

func (e serviceErr) Error() string                   { return e.code + ": " + e.msg }
func (e serviceErr) ServiceStatus() (string, string) { return e.code, e.msg }

// TestCountedLogsFailures: every failed call is logged with its operation,
// keyspace, the backend's status and message, and the error; a refused
// precondition at info, other failures at warn; at most failureLogBurst
// lines per operation per window, the next line saying how many were held
// back; successful calls are not logged.
func TestCountedLogsFailures(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	f := &fakeStore{}
	c := CountLogged(f, slog.New(slog.NewJSONHandler(&buf, nil)))
	if _, err := c.Get(ctx, "t", [][]byte{[]byte("a")}); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatalf("a successful call was logged: %s", buf.String())
	}
	f.err = fmt.Errorf("datastore: commit: %w", serviceErr{"Aborted", "Transaction lock timeout."})
	for i := 0; i < failureLogBurst+5; i++ {
		_, _ = c.Upsert(ctx, "ks1", []Write{{Key: []byte("k")}})
	}
	f.err = &ConflictError{Conflicts: []Conflict{{Key: []byte("k")}}}
	_ = c.Delete(ctx, "ks2", []Write{{Key: []byte("k")}})
	type line struct {
		Level, Msg, Op, Keyspace, Status, Message, Err string
		Keys                                           int
		Withheld                                       int `json:"withheld_since_last"`
	}
	var lines []line
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var l line
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if len(lines) != failureLogBurst+1 {
		t.Fatalf("%d lines, want %d (the burst, then the conflict)", len(lines), failureLogBurst+1)
	}
	up := lines[0]
	if up.Level != "WARN" || up.Op != "upsert" || up.Keyspace != "ks1" || up.Keys != 1 || up.Status != "Aborted" ||
		up.Message != "Transaction lock timeout." || !strings.Contains(up.Err, "lock timeout") {
		t.Errorf("a failed upsert logged as %+v", up)
	}
	del := lines[failureLogBurst]
	if del.Level != "INFO" || del.Op != "delete" || del.Keyspace != "ks2" || del.Status != "" || !strings.Contains(del.Err, "precondition") {
		t.Errorf("a refused delete logged as %+v", del)
	}
	// The window passes: the next upsert failure says what was held back.
	c.log.mu.Lock()
	c.log.win[OpUpsert].start = time.Now().Add(-failureLogWindow)
	c.log.mu.Unlock()
	buf.Reset()
	f.err = errors.New("backend down")
	_, _ = c.Upsert(ctx, "ks1", nil)
	var l line
	if err := json.Unmarshal(buf.Bytes(), &l); err != nil || l.Withheld != 5 || l.Status != "" || l.Err != "backend down" {
		t.Errorf("the first line of the next window: %+v (%v), want 5 withheld", l, err)
	}
}
