package blog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"google.golang.org/grpc"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/adapters/datastore"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
)

// server is a real backend behind its real adapter.
type server struct {
	name   string
	store  adapters.Store // the adapter, under the contract if one is given
	direct adapters.Store // the adapter, straight
	codec  Codec
	ks     adapters.Keyspace
	// wire counts the requests the adapter sent (HTTP requests, RPCs).
	wire *atomic.Int64
	// stored checks the records of ks's log as the layout documents them.
	stored func(t *testing.T, direct adapters.Store, ks adapters.Keyspace)
	// contract is the one store is under, if any.
	contract *contract.Contract
}

// countingTransport counts the HTTP requests it sends.
type countingTransport struct {
	next policy.Transporter
	n    *atomic.Int64
}

func (c countingTransport) Do(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.Do(req)
}

func azuriteServer(t testing.TB, c *contract.Contract) server {
	t.Helper()
	url := aztest.Azurite(t)
	wire := &atomic.Int64{}
	var tr policy.Transporter = &http.Client{Transport: http.DefaultTransport}
	if c != nil {
		tr = c.Transport(tr)
	}
	s, err := aztable.New(aztable.Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), MaxRetries: 3,
		RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond, Transport: countingTransport{tr, wire}})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := aztable.New(aztable.Options{ConnectionString: aztest.ConnectionString(url, aztest.Key)})
	if err != nil {
		t.Fatal(err)
	}
	codec := aztable.LogCodec()
	ks := adapters.Keyspace(aztest.TableName("Blog")) // mixed case: the log is the table's whatever the spelling
	t.Cleanup(func() { dropLog(direct, codec, ks) })
	return server{name: "azurite", store: s, direct: direct, codec: codec, ks: ks, wire: wire, stored: azureStored, contract: c}
}

// dropLog deletes the records of ks's log.
func dropLog(s adapters.Store, c Codec, ks adapters.Keyspace) {
	ctx := context.Background()
	start, end := c.EntryRange(ks)
	recs, _, _ := s.GetRange(ctx, c.Keyspace(ks), start, end, 0)
	ws := []adapters.Write{{Key: c.FenceKey(ks)}}
	for _, r := range recs {
		ws = append(ws, adapters.Write{Key: r.Key})
	}
	_ = s.Delete(ctx, c.Keyspace(ks), ws)
}

var azEntryRow = regexp.MustCompile(`^e[0-9a-f]{16}-[0-9a-f]{4}$`)

// azureStored: table nemolog, PartitionKey the lower-cased table name;
// the fence at RowKey "fence" with Int64 Epoch, Token, Last and String
// Holder; entries at e<16 hex>-<4 hex> with Int64 Seq, Int32 Part and
// Binary D0, D1, ... of at most 64 KiB.
func azureStored(t *testing.T, direct adapters.Store, ks adapters.Keyspace) {
	t.Helper()
	ctx := context.Background()
	pk := strings.ToLower(string(ks))
	recs, err := direct.Get(ctx, aztable.LogTable, [][]byte{tablecodec.EncodeKey(pk, "fence")})
	if err != nil || recs[0].Value == nil {
		t.Fatalf("fence: %v %+v", err, recs)
	}
	e, err := tablecodec.DecodeEntity(recs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]tablecodec.EdmType{"Epoch": tablecodec.EdmInt64, "Token": tablecodec.EdmInt64, "Last": tablecodec.EdmInt64,
		"Holder": tablecodec.EdmString, "Keyspace": tablecodec.EdmString} {
		if p, ok := e.Get(name); !ok || p.Type != typ {
			t.Errorf("fence property %s: %+v, want %v", name, p, typ)
		}
	}
	if p, _ := e.Get("Keyspace"); p.Value != string(ks) {
		t.Errorf("fence names keyspace %v, want %q (its case kept)", p.Value, ks)
	}
	if len(e.Props) != 5 {
		t.Errorf("fence properties %+v", e.Props)
	}
	ents, _, err := direct.GetRange(ctx, aztable.LogTable, tablecodec.EncodeKey(pk, ""), tablecodec.EncodeKey(pk, "fence"), 0)
	if err != nil || len(ents) == 0 {
		t.Fatalf("entries: %v, %d", err, len(ents))
	}
	chunked := false
	for _, r := range ents {
		e, err := tablecodec.DecodeEntity(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if e.PartitionKey != pk || !azEntryRow.MatchString(e.RowKey) {
			t.Fatalf("entry keys (%q, %q)", e.PartitionKey, e.RowKey)
		}
		for _, p := range e.Props {
			switch {
			case p.Name == "Seq" && p.Type == tablecodec.EdmInt64, p.Name == "Part" && p.Type == tablecodec.EdmInt32:
			case strings.HasPrefix(p.Name, "D") && p.Type == tablecodec.EdmBinary && len(p.Value.([]byte)) <= tablecodec.MaxValueBytes:
				chunked = chunked || p.Name == "D1"
			default:
				t.Fatalf("entry %s property %s %v", e.RowKey, p.Name, p.Type)
			}
		}
	}
	if !chunked {
		t.Error("no entry spans several Binary properties")
	}
}

func dsServer(t testing.TB, name, host string, c *contract.Contract) server {
	t.Helper()
	wire := &atomic.Int64{}
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		wire.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	ics := []grpc.UnaryClientInterceptor{count}
	if c != nil {
		ics = append(ics, c.Interceptor())
	}
	s, err := datastore.Open(context.Background(), datastore.Options{EmulatorHost: host, RetryBase: time.Millisecond, Interceptors: ics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	direct, err := datastore.Open(context.Background(), datastore.Options{EmulatorHost: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	ks := dscodec.Partition{Project: dstest.Project(t), Namespace: "ns1"}.Keyspace()
	return server{name: name, store: s, direct: direct, codec: datastore.LogCodec(), ks: ks, wire: wire, stored: datastoreStored, contract: c}
}

// datastoreStored: in the default namespace, NemoLog/<namespace> with
// unindexed integers Epoch, Token, Last and string Holder; its children
// NemoLogEntry/<seq<<12|part> with integers Seq, Part and an unindexed
// blob Data.
func datastoreStored(t *testing.T, direct adapters.Store, ks adapters.Keyspace) {
	t.Helper()
	p, _ := dscodec.ParseKeyspace(ks)
	lks := dscodec.Partition{Project: p.Project, Database: p.Database}.Keyspace()
	recs, _, err := direct.GetRange(context.Background(), lks, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	fences, entries := 0, 0
	for _, r := range recs {
		er, err := dscodec.DecodeValue(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		path, props := er.Entity.GetKey().GetPath(), er.Entity.GetProperties()
		if path[0].GetKind() != datastore.LogKind || path[0].GetName() != p.Namespace {
			t.Fatalf("entity %v in the log namespace", path)
		}
		unindexed := func(names ...string) {
			for _, n := range names {
				if v := props[n]; v == nil || !v.GetExcludeFromIndexes() {
					t.Errorf("%v: property %s %v", path, n, v)
				}
			}
		}
		switch len(path) {
		case 1:
			fences++
			unindexed("Epoch", "Token", "Last", "Holder", "Keyspace")
			if _, ok := props["Holder"].GetValueType().(*datastorepb.Value_StringValue); !ok || len(props) != 5 {
				t.Errorf("fence properties %v", props)
			}
		case 2:
			entries++
			unindexed("Seq", "Part", "Data")
			seq, part := props["Seq"].GetIntegerValue(), props["Part"].GetIntegerValue()
			if path[1].GetKind() != datastore.LogEntryKind || path[1].GetId() != seq<<12|part || props["Data"].GetBlobValue() == nil && len(props) != 3 {
				t.Errorf("entry %v properties %v", path, props)
			}
		default:
			t.Fatalf("entity %v", path)
		}
	}
	if fences != 1 || entries == 0 {
		t.Fatalf("%d fences, %d entries", fences, entries)
	}
}

func servers(t *testing.T, c func() *contract.Contract) []server {
	return []server{
		azuriteServer(t, c()),
		dsServer(t, "datastore-emulator", dstest.Emulator(t), c()),
		dsServer(t, "firestore", dstest.FirestoreEmulator(t), c()),
	}
}

// TestServers runs the log on Azurite, the Datastore emulator and the
// Firestore emulator through the real adapters: appends alone, together
// and at the limits (an entry as big as a call holds, in several parts,
// and a batch over a call's bytes), refusal of a bigger one, fencing by a
// new owner who reads everything back, truncation; and the stored records
// are the documented ones.
func TestServers(t *testing.T) {
	for _, s := range servers(t, func() *contract.Contract { return nil }) {
		t.Run(s.name, func(t *testing.T) { serverScenario(t, s) })
	}
}

func serverScenario(t *testing.T, s server) {
	ctx := context.Background()
	o := Options{Store: s.store, Codec: s.codec, Logger: quiet}
	a, entries := mustOpen(t, o, s.ks, 1, "node-a")
	if len(entries) != 0 {
		t.Fatalf("a new log holds %s", show(entries))
	}
	want := []string{"first"}
	mustAppend(t, a, "first")
	var wg sync.WaitGroup
	got := make([]uint64, 8)
	for i := range got {
		wg.Go(func() { got[i] = mustAppend(t, a, fmt.Sprintf("c%d", i)) })
	}
	wg.Wait()
	want = append(want, make([]string, 8)...)
	for i, seq := range got {
		want[seq-1] = fmt.Sprintf("c%d", i)
	}

	most := a.MaxEntryBytes()
	lim := s.codec.Limits()
	t.Logf("%s: an entry holds at most %d bytes (%d parts of %d)", s.name, most, (most+lim.RecordBytes-1)/lim.RecordBytes, lim.RecordBytes)
	pattern := func(n, salt int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*31 + salt)
		}
		return string(b)
	}
	big := pattern(most, 1)
	calls := a.Stats().Calls
	mustAppend(t, a, big)
	want = append(want, big)
	if a.Stats().Calls != calls+1 {
		t.Fatalf("the biggest entry took %d calls", a.Stats().Calls-calls)
	}
	if _, err := a.Append(ctx, make([]byte, lim.CallBytes)); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("an entry over a call: %v", err)
	}
	// Three entries of more than a third of a call each, at once: more
	// than one call.
	halves := []string{pattern(most/2+1, 2), pattern(most/2+1, 3), pattern(most/2+1, 4)}
	calls = a.Stats().Calls
	seqs := make([]uint64, len(halves))
	for i, h := range halves {
		wg.Go(func() { seqs[i] = mustAppend(t, a, h) })
	}
	wg.Wait()
	if n := a.Stats().Calls - calls; n < 2 {
		t.Fatalf("three entries of %d bytes took %d calls", most/2+1, n)
	}
	want = append(want, make([]string, len(halves))...)
	for i, seq := range seqs {
		want[seq-1] = halves[i]
	}

	b, entries := mustOpen(t, o, s.ks, 2, "node-b")
	wantEntries(t, entries, 1, want...)
	if _, err := a.Append(ctx, []byte("late")); !errors.Is(err, ErrFenced) || errors.Is(err, adapters.ErrUnknownOutcome) {
		t.Fatalf("append of the fenced owner: %v", err)
	}
	mustAppend(t, b, "b1")
	want = append(want, "b1")
	// The same node restarting at its epoch fences its earlier Log (its
	// fence record is new although epoch, holder and Last are the same:
	// Datastore keeps the version of an entity rewritten unchanged).
	b2, entries := mustOpen(t, o, s.ks, 2, "node-b")
	wantEntries(t, entries, 1, want...)
	if _, err := b.Append(ctx, []byte("stale")); !errors.Is(err, ErrFenced) {
		t.Fatalf("append of the earlier Log at the same epoch: %v", err)
	}
	b = b2
	if err := b.Truncate(ctx, 3); err != nil {
		t.Fatal(err)
	}
	_, entries = mustOpen(t, o, s.ks, 3, "node-c")
	wantEntries(t, entries, 3, want[2:]...)
	s.stored(t, s.direct, s.ks)
	st := b.Stats()
	t.Logf("%s: the new owner's append, truncation and reads made %d store calls", s.name, st.StoreCalls)
}

// TestServersLostReplies: the log under each service's API contract with a
// third of the calls' answers lost after the backend carried them out (and
// one in ten failing before it), the adapters' own retries meeting the
// first attempt's effect: Open, appends (alone and together) and
// truncations settle by reading, every entry whose Append returned nil is
// read back by the next owner in seq order, nothing twice, and nothing
// whose Append failed for sure.
func TestServersLostReplies(t *testing.T) {
	seed := uint64(0)
	for _, s := range servers(t, func() *contract.Contract {
		seed++
		return contract.New(contract.Config{Seed: seed})
	}) {
		t.Run(s.name, func(t *testing.T) {
			s.contract.SetConfig(contract.Config{Seed: 30, LostRate: 0.3, ErrorRate: 0.1})
			lostRepliesScenario(t, s, s.contract)
		})
	}
}

func lostRepliesScenario(t *testing.T, s server, c *contract.Contract) {
	ctx := context.Background()
	o := Options{Store: s.store, Codec: s.codec, Logger: quiet}
	m := &logModel{t: t, acked: map[string]uint64{}, failed: map[string]bool{}, mayBeCut: 1, cut: 1}
	var l *Log
	epoch := uint64(1)
	reopen := func() {
		for {
			var err error
			var entries []Entry
			if l, entries, err = Open(ctx, o, s.ks, epoch, "node-a"); err == nil {
				m.check(entries)
				return
			}
			if errors.Is(err, ErrFenced) || errors.Is(err, ErrCorrupt) {
				t.Fatal(err)
			}
		}
	}
	reopen()
	n := 0
	for round := range 12 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 1 + round%4 {
			n++
			data := fmt.Sprintf("entry %d %s", n, bytes.Repeat([]byte{'x'}, n*7))
			wg.Go(func() {
				seq, err := l.Append(ctx, []byte(data))
				mu.Lock()
				m.record(data, seq, err)
				mu.Unlock()
			})
		}
		wg.Wait()
		if round%5 == 4 {
			below := l.Last() - 1
			m.mayBeCut = max(m.mayBeCut, below)
			if err := l.Truncate(ctx, below); err == nil {
				m.cut = max(m.cut, below)
			}
		}
		if l.Err() != nil {
			reopen()
		}
	}
	st := l.Stats()
	c.SetConfig(contract.Config{})
	epoch++
	reopen()
	t.Logf("%s: %d appends, %d acknowledged, %d failed, %d unknown; the last Log made %d calls, settled %d; contract %+v",
		s.name, n, len(m.acked), len(m.failed), m.unknown, st.Calls, st.Settles, c.Stats())
	if c.Stats().Lost == 0 || len(m.acked) == 0 {
		t.Fatal("no answer lost, or nothing acknowledged")
	}
}
