package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/adapters/datastore"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
)

// coreScenario runs acquire, refusal, renewal, release and takeover for
// ks on a real server, and a race for the free lease of ks2.
func coreScenario(t *testing.T, s adapters.Store, codec Codec, ks, ks2 adapters.Keyspace) {
	ctx := context.Background()
	clkA, clkB, clkC := newClock(), newClock(), newClock()
	a := manager(t, s, codec, "node-a", clkA)
	b := manager(t, s, codec, "node-b", clkB)
	c := manager(t, s, codec, "node-c", clkC)

	mustHold(t, a, ks)
	if a.Epoch(ks) != 1 {
		t.Fatalf("epoch %d", a.Epoch(ks))
	}
	r, v1 := stored(t, s, codec, ks)
	if r.Holder != "node-a" || r.Epoch != 1 || !r.Expiry.Equal(clkA.Now().Add(ttl)) {
		t.Fatalf("stored %+v, want node-a epoch 1 expiring %v", r, clkA.Now().Add(ttl))
	}
	mustBeHeld(t, b, ks, "node-a", 1)

	// A renewal gives the record a new version even when the clock has
	// not moved (Datastore keeps the version of an unchanged entity).
	a.renewAll(ctx)
	if st := a.Stats(); st.Renewals != 1 || st.RenewalFailures != 0 {
		t.Fatalf("stats %+v", st)
	}
	if r, v2 := stored(t, s, codec, ks); v2 == v1 || r.Holder != "node-a" || r.Epoch != 1 {
		t.Fatalf("after renewal %+v version %s (was %s)", r, v2, v1)
	}

	// Release: B takes it at once (after its refusal is no longer
	// answered from memory), epoch 2.
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := stored(t, s, codec, ks); r.Holder != "" || r.Epoch != 1 {
		t.Fatalf("after release %+v", r)
	}
	clkB.Advance(ttl / 15)
	mustHold(t, b, ks)
	if b.Epoch(ks) != 2 {
		t.Fatalf("B epoch %d", b.Epoch(ks))
	}

	// Takeover: B stops renewing; C takes over after a TTL of the
	// unchanged version on its own clock, epoch 3.
	mustBeHeld(t, c, ks, "node-b", 2)
	clkC.Advance(ttl - time.Millisecond)
	mustBeHeld(t, c, ks, "node-b", 2)
	clkC.Advance(time.Millisecond)
	mustHold(t, c, ks)
	if st := c.Stats(); c.Epoch(ks) != 3 || st.Takeovers != 1 {
		t.Fatalf("C epoch %d stats %+v", c.Epoch(ks), st)
	}
	b.renewAll(ctx) // refused: dropped
	if st := b.Stats(); st.Held != 0 || st.RenewalFailures != 1 {
		t.Fatalf("B stats %+v", st)
	}
	mustBeHeld(t, b, ks, "node-c", 3)

	// Two nodes race for a free lease: exactly one wins.
	d := manager(t, s, codec, "node-d", newClock())
	e := manager(t, s, codec, "node-e", newClock())
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, m := range []*Manager{d, e} {
		wg.Go(func() { <-start; errs[i] = m.Hold(ctx, ks2) })
	}
	close(start)
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("race: %v", errs)
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrHeld) {
			t.Fatalf("race loser: %v", err)
		}
	}
	if r, _ := stored(t, s, codec, ks2); r.Epoch != 1 || (r.Holder != "node-d" && r.Holder != "node-e") {
		t.Fatalf("race: stored %+v", r)
	}
}

func TestAzurite(t *testing.T) {
	url := aztest.Azurite(t)
	s, err := aztable.New(aztable.Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), MaxRetries: 2, RetryDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	codec := aztable.LeaseCodec{}
	// Mixed case: the lease is the table's whatever the spelling.
	ks := adapters.Keyspace(aztest.TableName("Lease"))
	ks2 := adapters.Keyspace(aztest.TableName("lease"))
	t.Cleanup(func() {
		_ = s.Delete(context.Background(), aztable.LeaseTable, []adapters.Write{{Key: codec.Key(ks)}, {Key: codec.Key(ks2)}})
	})
	coreScenario(t, s, codec, ks, ks2)

	// The stored entity is the documented one.
	recs, err := s.Get(context.Background(), aztable.LeaseTable, [][]byte{tablecodec.EncodeKey(aztable.LeasePartition, strings.ToLower(string(ks)))})
	if err != nil || recs[0].Value == nil {
		t.Fatalf("raw read: %v %+v", err, recs)
	}
	ent, err := tablecodec.DecodeEntity(recs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]tablecodec.EdmType{"Holder": tablecodec.EdmString, "Epoch": tablecodec.EdmInt64,
		"Expiry": tablecodec.EdmDateTime, "Addr": tablecodec.EdmString} {
		if p, ok := ent.Get(name); !ok || p.Type != typ {
			t.Errorf("property %s: %+v, want type %v", name, p, typ)
		}
	}
	if p, _ := ent.Get("Addr"); p.Value != addrOf("node-c") {
		t.Errorf("Addr %v, want the holder's", p.Value)
	}
	if ent.PartitionKey != "lease" || ent.RowKey != strings.ToLower(string(ks)) {
		t.Errorf("entity keys %q %q", ent.PartitionKey, ent.RowKey)
	}
	// The same table spelled in lower case is the same lease.
	f := manager(t, s, codec, "node-f", newClock())
	mustBeHeld(t, f, adapters.Keyspace(strings.ToLower(string(ks))), "node-c", 3)
}

func TestDatastoreEmulator(t *testing.T) {
	host := dstest.Emulator(t)
	s, err := datastore.Open(context.Background(), datastore.Options{EmulatorHost: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	project := dstest.Project(t)
	codec := datastore.LeaseCodec{}
	ks := dscodec.Partition{Project: project, Namespace: "ns1"}.Keyspace()
	ks2 := dscodec.Partition{Project: project}.Keyspace() // the default namespace
	coreScenario(t, s, codec, ks, ks2)

	// The stored entities are the documented ones: kind NemoLease in the
	// default namespace, named after the namespace.
	lks := dscodec.Partition{Project: project}.Keyspace()
	if codec.Keyspace(ks) != lks || codec.Keyspace(ks2) != lks {
		t.Fatalf("lease keyspaces %q %q", codec.Keyspace(ks), codec.Keyspace(ks2))
	}
	recs, _, err := s.GetRange(context.Background(), lks, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range recs {
		er, err := dscodec.DecodeValue(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		path := er.Entity.GetKey().GetPath()
		if len(path) != 1 || path[0].GetKind() != datastore.LeaseKind {
			t.Fatalf("unexpected entity %v", er.Entity.GetKey())
		}
		names[path[0].GetName()] = true
		props := er.Entity.GetProperties()
		if _, ok := props["Holder"].GetValueType().(*datastorepb.Value_StringValue); !ok {
			t.Errorf("Holder %v", props["Holder"])
		}
		if _, ok := props["Epoch"].GetValueType().(*datastorepb.Value_IntegerValue); !ok {
			t.Errorf("Epoch %v", props["Epoch"])
		}
		if props["Expiry"].GetTimestampValue() == nil {
			t.Errorf("Expiry %v", props["Expiry"])
		}
		if props["Addr"].GetStringValue() != addrOf(props["Holder"].GetStringValue()) {
			t.Errorf("Addr %v, Holder %v", props["Addr"], props["Holder"])
		}
	}
	if len(names) != 2 || !names["ns1"] || !names[datastore.DefaultNamespaceName] {
		t.Fatalf("lease entities named %v", names)
	}
}

func TestAzuriteBatchRenewal(t *testing.T) {
	url := aztest.Azurite(t)
	s, err := aztable.New(aztable.Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), MaxRetries: 2, RetryDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	codec := aztable.LeaseCodec{}
	var kss [3]adapters.Keyspace
	var cleanup []adapters.Write
	for i := range kss {
		kss[i] = adapters.Keyspace(aztest.TableName("batch"))
		cleanup = append(cleanup, adapters.Write{Key: codec.Key(kss[i])})
	}
	t.Cleanup(func() { _ = s.Delete(context.Background(), aztable.LeaseTable, cleanup) })
	batchRenewal(t, s, codec, kss)
}

func TestDatastoreBatchRenewal(t *testing.T) {
	host := dstest.Emulator(t)
	s, err := datastore.Open(context.Background(), datastore.Options{EmulatorHost: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	project := dstest.Project(t)
	var kss [3]adapters.Keyspace
	for i, ns := range []string{"b1", "b2", "b3"} {
		kss[i] = dscodec.Partition{Project: project, Namespace: ns}.Keyspace()
	}
	batchRenewal(t, s, datastore.LeaseCodec{}, kss)
}

// lostRepliesOnServer: one node renews a lease through the service's API
// contract with a third of the calls' answers lost after the backend
// applied them (and the adapter's own retries seeing the first attempt's
// effect), acquire and release included. It never drops its own lease,
// never stops trusting it, and its release lets another node in at once.
func lostRepliesOnServer(t *testing.T, c *contract.Contract, s, direct adapters.Store, codec Codec, ks adapters.Keyspace) {
	t.Helper()
	ctx := context.Background()
	clk := newClock()
	a := manager(t, s, codec, "node-a", clk)
	c.LoseNext(1)
	mustHold(t, a, ks)
	c.SetConfig(contract.Config{Seed: 21, LostRate: 0.3})
	for range 60 {
		clk.Advance(ttl / 3)
		a.renewAll(ctx)
		mustHold(t, a, ks)
	}
	st := a.Stats()
	t.Logf("60 renewals, a third of the answers lost: %+v; contract %+v", st, c.Stats())
	if st.Drops != 0 || st.Held != 1 || a.Epoch(ks) != 1 || c.Stats().Lost == 0 {
		t.Fatalf("stats %+v epoch %d", st, a.Epoch(ks))
	}
	r, v := stored(t, direct, codec, ks)
	a.mu.Lock()
	mine := a.leases[ks].version
	a.mu.Unlock()
	if r.Holder != "node-a" || r.Epoch != 1 || v != mine {
		t.Fatalf("stored %+v version %s, the node knows %s", r, v, mine)
	}
	c.LoseNext(1)
	if err := a.Close(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if r, _ := stored(t, direct, codec, ks); r.Holder != "" || r.Epoch != 1 {
		t.Fatalf("after release %+v", r)
	}
}

func TestAzuriteLostReplies(t *testing.T) {
	url := aztest.Azurite(t)
	c := contract.New(contract.Config{Seed: 20})
	s, err := aztable.New(aztable.Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), MaxRetries: 2,
		RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond, Transport: c.Transport(nil)})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := aztable.New(aztable.Options{ConnectionString: aztest.ConnectionString(url, aztest.Key)})
	if err != nil {
		t.Fatal(err)
	}
	codec := aztable.LeaseCodec{}
	ks := adapters.Keyspace(aztest.TableName("lost"))
	t.Cleanup(func() {
		_ = direct.Delete(context.Background(), aztable.LeaseTable, []adapters.Write{{Key: codec.Key(ks)}})
	})
	lostRepliesOnServer(t, c, s, direct, codec, ks)
}

func TestDatastoreLostReplies(t *testing.T) {
	for _, b := range []struct{ name, host string }{{"emulator", dstest.Emulator(t)}, {"firestore", dstest.FirestoreEmulator(t)}} {
		t.Run(b.name, func(t *testing.T) {
			c := contract.New(contract.Config{Seed: 20})
			s, err := datastore.Open(context.Background(), datastore.Options{EmulatorHost: b.host, RetryBase: time.Millisecond,
				Interceptors: []grpc.UnaryClientInterceptor{c.Interceptor()}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			direct, err := datastore.Open(context.Background(), datastore.Options{EmulatorHost: b.host})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { direct.Close() })
			ks := dscodec.Partition{Project: dstest.Project(t), Namespace: "lost"}.Keyspace()
			lostRepliesOnServer(t, c, s, direct, datastore.LeaseCodec{}, ks)
		})
	}
}

// ownerOnServer: Owner on a real server finds the holder and its address,
// answers from memory until invalidated after a hand-over (Release), and
// reads a record an older nemo wrote (writeOld: no Addr) with Addr "".
func ownerOnServer(t *testing.T, s adapters.Store, codec Codec, ks, old adapters.Keyspace, writeOld func(ks adapters.Keyspace, r adapters.LeaseRecord)) {
	t.Helper()
	ctx := context.Background()
	clkA, clkB := newClock(), newClock()
	a := manager(t, s, codec, "node-a", clkA)
	b := manager(t, s, codec, "node-b", clkB)
	mustHold(t, a, ks)
	held := Owner{Holder: "node-a", Addr: addrOf("node-a"), Epoch: 1, Live: true}
	wantOwner(t, b, ks, held, 1)
	if err := a.Release(ctx, ks); err != nil {
		t.Fatal(err)
	}
	wantOwner(t, b, ks, held, 0)
	b.Invalidate(ks)
	wantOwner(t, b, ks, Owner{Epoch: 1}, 1)
	mustHold(t, b, ks)
	wantOwner(t, a, ks, Owner{Holder: "node-b", Addr: addrOf("node-b"), Epoch: 2, Live: true}, 1)
	if r, _ := stored(t, s, codec, ks); r.Holder != "node-b" || r.Addr != addrOf("node-b") {
		t.Fatalf("stored %+v", r)
	}

	writeOld(old, adapters.LeaseRecord{Holder: "node-old", Epoch: 5, Expiry: clkA.Now().Add(ttl)})
	wantOwner(t, a, old, Owner{Holder: "node-old", Epoch: 5, Live: true}, 1)
	if he := mustBeHeld(t, a, old, "node-old", 5); he.Addr != "" {
		t.Fatalf("HeldError %+v", he)
	}
	clkA.Advance(ttl)
	mustHold(t, a, old)
	if r, _ := stored(t, s, codec, old); r.Holder != "node-a" || r.Epoch != 6 || r.Addr != addrOf("node-a") {
		t.Fatalf("taken over from an older nemo: %+v", r)
	}
}

func TestAzuriteOwner(t *testing.T) {
	url := aztest.Azurite(t)
	s, err := aztable.New(aztable.Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), MaxRetries: 2, RetryDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	codec := aztable.LeaseCodec{}
	ks, old := adapters.Keyspace(aztest.TableName("owner")), adapters.Keyspace(aztest.TableName("older"))
	t.Cleanup(func() {
		_ = s.Delete(context.Background(), aztable.LeaseTable, []adapters.Write{{Key: codec.Key(ks)}, {Key: codec.Key(old)}})
	})
	// The entity as nemo wrote it before it kept the peer address.
	writeOld := func(ks adapters.Keyspace, r adapters.LeaseRecord) {
		e := &tablecodec.Entity{PartitionKey: aztable.LeasePartition, RowKey: strings.ToLower(string(ks)), Props: []tablecodec.Property{
			{Name: "Holder", Type: tablecodec.EdmString, Value: r.Holder},
			{Name: "Epoch", Type: tablecodec.EdmInt64, Value: int64(r.Epoch)},
			{Name: "Expiry", Type: tablecodec.EdmDateTime, Value: tablecodec.TruncateTicks(r.Expiry)},
		}}
		if _, err := s.Upsert(context.Background(), aztable.LeaseTable, []adapters.Write{{Key: codec.Key(ks), Value: tablecodec.EncodeEntity(e)}}); err != nil {
			t.Fatal(err)
		}
	}
	ownerOnServer(t, s, codec, ks, old, writeOld)
}

func TestDatastoreOwner(t *testing.T) {
	for _, b := range []struct{ name, host string }{{"emulator", dstest.Emulator(t)}, {"firestore", dstest.FirestoreEmulator(t)}} {
		t.Run(b.name, func(t *testing.T) {
			s, err := datastore.Open(context.Background(), datastore.Options{EmulatorHost: b.host})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			project := dstest.Project(t)
			codec := datastore.LeaseCodec{}
			ks := dscodec.Partition{Project: project, Namespace: "owner"}.Keyspace()
			old := dscodec.Partition{Project: project, Namespace: "older"}.Keyspace()
			// The entity as nemo wrote it before it kept the peer address.
			writeOld := func(ks adapters.Keyspace, r adapters.LeaseRecord) {
				v, err := dscodec.EncodeValue(&datastorepb.EntityResult{Entity: &datastorepb.Entity{Properties: map[string]*datastorepb.Value{
					"Holder": {ValueType: &datastorepb.Value_StringValue{StringValue: r.Holder}, ExcludeFromIndexes: true},
					"Epoch":  {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: int64(r.Epoch)}, ExcludeFromIndexes: true},
					"Expiry": {ValueType: &datastorepb.Value_TimestampValue{TimestampValue: timestamppb.New(r.Expiry)}, ExcludeFromIndexes: true},
				}}})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Upsert(context.Background(), codec.Keyspace(ks), []adapters.Write{{Key: codec.Key(ks), Value: v}}); err != nil {
					t.Fatal(err)
				}
			}
			ownerOnServer(t, s, codec, ks, old, writeOld)
		})
	}
}
