package contract_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
)

// dsClient is a Go Datastore client of the emulator, through the contract
// when c is not nil.
func dsClient(t *testing.T, project string, c *contract.Contract) *datastore.Client {
	t.Helper()
	opts := []option.ClientOption{option.WithEndpoint("passthrough:///" + dstest.Emulator(t)), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	if c != nil {
		opts = append(opts, option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(c.Interceptor())))
	}
	cl, err := datastore.NewClient(context.Background(), project, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

type thing struct {
	N int
	G string
}

// TestDatastoreClientUnderContract: the Go client's iterator and GetMulti,
// which rely only on more_results, end_cursor, skipped_results and
// deferred, read through the contract (most batches cut short, many
// empty, cuts inside offsets, most keys deferred) exactly what they read
// directly: the contract answers as the API allows, and every cursor it
// hands out is a real position.
func TestDatastoreClientUnderContract(t *testing.T) {
	project := dstest.Project(t)
	ctx := context.Background()
	direct := dsClient(t, project, nil)
	c := contract.New(contract.Config{Seed: 7, ShortRate: 0.8, EmptyRate: 0.4, DeferRate: 0.5})
	under := dsClient(t, project, c)
	var keys []*datastore.Key
	var things []*thing
	parent := datastore.NameKey("P", "p", nil)
	for i := 1; i <= 40; i++ {
		k := datastore.IDKey("K", int64(i), nil)
		if i%3 == 0 {
			k = datastore.IDKey("K", int64(i), parent)
		}
		keys = append(keys, k)
		things = append(things, &thing{N: i % 13, G: string(rune('a' + i%4))})
	}
	if _, err := direct.PutMulti(ctx, keys, things); err != nil {
		t.Fatal(err)
	}
	queries := []struct {
		name string
		q    *datastore.Query
	}{
		{"all", datastore.NewQuery("K")},
		{"order", datastore.NewQuery("K").Order("-N").Order("__key__")},
		{"filter", datastore.NewQuery("K").FilterField("N", ">=", 5).Order("N")},
		{"offset", datastore.NewQuery("K").Offset(17)},
		{"offset beyond", datastore.NewQuery("K").Offset(45)},
		{"limit offset", datastore.NewQuery("K").Order("G").Limit(7).Offset(9)},
		{"keys", datastore.NewQuery("K").KeysOnly().Offset(3)},
		{"projection", datastore.NewQuery("K").Project("G").Distinct()},
		{"ancestor", datastore.NewQuery("K").Ancestor(parent).Offset(2)},
		{"kindless range", datastore.NewQuery("").FilterField("__key__", ">", datastore.IDKey("K", 10, nil))},
	}
	for _, q := range queries {
		want, err := run(ctx, direct, q.q)
		if err != nil {
			t.Fatalf("%s directly: %v", q.name, err)
		}
		got, err := run(ctx, under, q.q)
		if err != nil {
			t.Fatalf("%s under the contract: %v", q.name, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n direct: %v\n under:  %v", q.name, want, got)
		}
	}
	// Paging by cursors taken between batches, as an application does.
	order := queries[1].q
	want, _ := run(ctx, direct, order)
	var paged []string
	var cursor datastore.Cursor
	for pages := 0; ; pages++ {
		if pages > 50 {
			t.Fatal("cursor paging did not end")
		}
		q := order.Limit(6)
		if pages > 0 {
			q = q.Start(cursor)
		}
		it := under.Run(ctx, q)
		n := 0
		for {
			var th thing
			k, err := it.Next(&th)
			if errors.Is(err, iterator.Done) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			paged = append(paged, fmt.Sprint(k, th))
			n++
		}
		if n == 0 {
			break
		}
		if cursor, _ = it.Cursor(); cursor.String() == "" {
			t.Fatal("no cursor after a page")
		}
	}
	if !slices.Equal(paged, want) {
		t.Errorf("paged by cursors:\n direct: %v\n under:  %v", want, paged)
	}
	// GetMulti with deferred keys, and missing ones.
	ask := append(slices.Clone(keys), datastore.NameKey("K", "missing", nil))
	got := make([]thing, len(ask))
	err := under.GetMulti(ctx, ask, got)
	var me datastore.MultiError
	if !errors.As(err, &me) || !errors.Is(me[len(ask)-1], datastore.ErrNoSuchEntity) {
		t.Fatalf("GetMulti: %v", err)
	}
	for i, th := range things {
		if me[i] != nil || got[i] != *th {
			t.Errorf("GetMulti %v: %v %v, want %v", ask[i], got[i], me[i], *th)
		}
	}
	st := c.Stats()
	t.Logf("%+v", st)
	if st.Cut == 0 || st.Empty == 0 || st.Probes == 0 || st.Deferred == 0 {
		t.Errorf("the contract injected too little: %+v", st)
	}
}

func run(ctx context.Context, c *datastore.Client, q *datastore.Query) ([]string, error) {
	var out []string
	it := c.Run(ctx, q)
	for {
		var th thing
		k, err := it.Next(&th)
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprint(k, th))
	}
}

// TestDatastoreErrorsUnderContract: failures before the backend change
// nothing and are UNAVAILABLE, or ABORTED where the service gives it; a
// lost reply leaves the write applied and answers UNAVAILABLE, as the
// service does when it cannot say; DefiniteWrites keeps writes to ABORTED.
func TestDatastoreErrorsUnderContract(t *testing.T) {
	project := dstest.Project(t)
	ctx := context.Background()
	direct := dsClient(t, project, nil)
	c := contract.New(contract.Config{Seed: 1, ErrorRate: 1})
	under := dsClient(t, project, c)
	k := datastore.NameKey("K", "k", nil)
	codesSeen := map[codes.Code]int{}
	for i := 0; i < 20; i++ {
		_, err := under.Put(ctx, k, &thing{N: i})
		codesSeen[status.Code(err)]++
		if err := direct.Get(ctx, k, &thing{}); !errors.Is(err, datastore.ErrNoSuchEntity) {
			t.Fatalf("a write failed before the backend was applied: %v", err)
		}
		if err := under.Get(ctx, k, &thing{}); status.Code(err) != codes.Unavailable {
			t.Fatalf("a read outside a transaction failed with %v, want UNAVAILABLE", err)
		}
	}
	if codesSeen[codes.Unavailable] == 0 || codesSeen[codes.Aborted] == 0 || len(codesSeen) != 2 {
		t.Errorf("writes failed with %v, want UNAVAILABLE and ABORTED", codesSeen)
	}
	c.SetConfig(contract.Config{Seed: 1, ErrorRate: 1, DefiniteWrites: true})
	for i := 0; i < 10; i++ {
		if _, err := under.Put(ctx, k, &thing{N: i}); status.Code(err) != codes.Aborted {
			t.Fatalf("DefiniteWrites: a write failed with %v, want ABORTED", err)
		}
	}
	c.SetConfig(contract.Config{})
	c.LoseNext(1)
	before := c.Stats()
	if _, err := under.Put(ctx, k, &thing{N: 42}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a lost reply: %v, want UNAVAILABLE", err)
	}
	var th thing
	if err := direct.Get(ctx, k, &th); err != nil || th.N != 42 {
		t.Fatalf("the write whose reply was lost: %v %v, want it applied", th, err)
	}
	if st := c.Stats(); st.Lost != before.Lost+1 || st.Ambiguous != before.Ambiguous+1 {
		t.Errorf("stats after one lost write: %+v, before it %+v", st, before)
	}
}

// TestDatastoreReadOnlyTransactionsNotAborted: a read inside a read-write
// transaction may fail ABORTED, as under contention; one inside a
// read-only transaction, which reads a snapshot and takes no locks, fails
// only UNAVAILABLE, as the service's would (a read-only Get that the Go
// client does not retry failed a CI run with ABORTED).
func TestDatastoreReadOnlyTransactionsNotAborted(t *testing.T) {
	project := dstest.Project(t)
	ctx := context.Background()
	c := contract.New(contract.Config{Seed: 1})
	under := dsClient(t, project, c)
	k := datastore.NameKey("K", "ro", nil)
	if _, err := under.Put(ctx, k, &thing{N: 1}); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{true, false} {
		var opts []datastore.TransactionOption
		if ro {
			opts = append(opts, datastore.ReadOnly)
		}
		c.SetConfig(contract.Config{Seed: 1})
		tx, err := under.NewTransaction(ctx, opts...)
		if err != nil {
			t.Fatal(err)
		}
		c.SetConfig(contract.Config{Seed: 1, ErrorRate: 1})
		seen := map[codes.Code]int{}
		for range 20 {
			seen[status.Code(tx.Get(k, &thing{}))]++
		}
		c.SetConfig(contract.Config{Seed: 1})
		_ = tx.Rollback()
		switch {
		case ro && (seen[codes.Unavailable] != 20):
			t.Errorf("reads in a read-only transaction failed with %v, want UNAVAILABLE only", seen)
		case !ro && (seen[codes.Aborted] == 0 || seen[codes.Unavailable] == 0):
			t.Errorf("reads in a read-write transaction failed with %v, want ABORTED and UNAVAILABLE", seen)
		}
	}
}

// TestDatastoreCutsInTransaction: a query that begins a transaction is
// cut, and probed for a cursor, inside that transaction, and the client
// goes on in it.
func TestDatastoreCutsInTransaction(t *testing.T) {
	project := dstest.Project(t)
	ctx := context.Background()
	direct := dsClient(t, project, nil)
	parent := datastore.NameKey("P", "p", nil)
	var keys []*datastore.Key
	for i := 1; i <= 5; i++ {
		keys = append(keys, datastore.IDKey("K", int64(i), parent))
	}
	if _, err := direct.PutMulti(ctx, keys, make([]thing, len(keys))); err != nil {
		t.Fatal(err)
	}
	var probes uint64
	for seed := uint64(1); seed <= 8; seed++ {
		c := contract.New(contract.Config{Seed: seed, ShortRate: 0.9, EmptyRate: 0.7})
		under := dsClient(t, project, c)
		_, err := under.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
			n, err := run(ctx, under, datastore.NewQuery("K").Ancestor(parent).Transaction(tx).Offset(1))
			if err != nil {
				return err
			}
			if len(n) != 4 {
				return fmt.Errorf("read %d entities, want 4", len(n))
			}
			_, err = tx.Put(datastore.IDKey("K", int64(seed), nil), &thing{N: 9})
			return err
		}, datastore.BeginLater)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		probes += c.Stats().Probes
	}
	if probes == 0 {
		t.Error("no query was probed for a cursor in its transaction")
	}
}

// azClient is an aztables service client of Azurite, through the
// contract when c is not nil, with the SDK's retries (short delays).
func azClient(t *testing.T, c *contract.Contract, retries int32) *aztables.ServiceClient {
	t.Helper()
	co := &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: retries, RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond}}}
	if c != nil {
		co.Transport = c.Transport(nil)
	}
	svc, err := aztables.NewServiceClientFromConnectionString(aztest.ConnectionString(aztest.Azurite(t), aztest.Key), co)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// TestAzureSDKUnderContract: the SDK's pagers, which rely only on the
// continuation headers, list through the contract (short pages, empty
// ones with continuation, transient errors the SDK retries, lost replies
// of reads) exactly what they list directly, for entities and tables.
func TestAzureSDKUnderContract(t *testing.T) {
	ctx := context.Background()
	direct := azClient(t, nil, -1)
	c := contract.New(contract.Config{Seed: 11, ShortRate: 0.8, EmptyRate: 0.4, ErrorRate: 0.1, LostRate: 0.1})
	under := azClient(t, c, 10)
	prefix := aztest.TableName("ct")
	var tables []string
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("%s%d", prefix, i)
		tables = append(tables, name)
		if _, err := direct.CreateTable(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = direct.DeleteTable(context.Background(), name, nil) })
	}
	tc := direct.NewClient(tables[0])
	for pk := 0; pk < 3; pk++ {
		for rk := 0; rk < 15; rk++ {
			e := fmt.Sprintf(`{"PartitionKey":"p%d","RowKey":"r%02d","N":%d}`, pk, rk, (pk*15+rk)%7)
			if _, err := tc.AddEntity(ctx, []byte(e), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, f := range []struct {
		filter string
		top    int32
	}{{"", 0}, {"", 4}, {"N gt 3", 0}, {"PartitionKey eq 'p1'", 5}, {"N eq 99", 0}} {
		want, err := listEntities(ctx, direct.NewClient(tables[0]), f.filter, f.top)
		if err != nil {
			t.Fatal(err)
		}
		got, err := listEntities(ctx, under.NewClient(tables[0]), f.filter, f.top)
		if err != nil {
			t.Fatalf("%q under the contract: %v", f.filter, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q top %d:\n direct: %v\n under:  %v", f.filter, f.top, want, got)
		}
	}
	filter := fmt.Sprintf("TableName ge '%s' and TableName lt '%s~'", prefix, prefix)
	var got []string
	p := under.NewListTablesPager(&aztables.ListTablesOptions{Filter: &filter, Top: to.Ptr[int32](2)})
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range page.Tables {
			got = append(got, *tp.Name)
		}
	}
	if !slices.Equal(got, tables) {
		t.Errorf("tables under the contract: %v, want %v", got, tables)
	}
	st := c.Stats()
	t.Logf("%+v", st)
	if st.Cut == 0 || st.Empty == 0 || st.Failed == 0 || st.Lost == 0 {
		t.Errorf("the contract injected too little: %+v", st)
	}
}

func listEntities(ctx context.Context, tc *aztables.Client, filter string, top int32) ([]string, error) {
	opts := &aztables.ListEntitiesOptions{}
	if filter != "" {
		opts.Filter = &filter
	}
	if top > 0 {
		opts.Top = &top
	}
	var out []string
	p := tc.NewListEntitiesPager(opts)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		if top > 0 && len(page.Entities) > int(top) {
			return nil, fmt.Errorf("a page of %d entities for $top %d", len(page.Entities), top)
		}
		for _, e := range page.Entities {
			out = append(out, strings.ReplaceAll(string(e), `"odata.etag"`, ""))
		}
	}
	slices.Sort(out) // ETags and Timestamps differ only if entities do
	return out, nil
}

// TestAzureErrorsUnderContract: a write lost after the backend applied it
// answers 500 OperationTimedOut with the service's error code; failures
// before it apply nothing; DefiniteWrites keeps writes to 503 ServerBusy.
func TestAzureErrorsUnderContract(t *testing.T) {
	ctx := context.Background()
	direct := azClient(t, nil, -1)
	c := contract.New(contract.Config{Seed: 5, ErrorRate: 1})
	under := azClient(t, c, -1)
	name := aztest.TableName("ce")
	if _, err := direct.CreateTable(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.DeleteTable(context.Background(), name, nil) })
	ent := []byte(`{"PartitionKey":"p","RowKey":"r","N":1}`)
	seen := map[string]int{}
	for i := 0; i < 20; i++ {
		_, err := under.NewClient(name).AddEntity(ctx, ent, nil)
		st, code := aztest.Status(err)
		seen[fmt.Sprintf("%d %s", st, code)]++
	}
	if len(seen) != 2 || seen["503 ServerBusy"] == 0 || seen["500 OperationTimedOut"] == 0 {
		t.Errorf("writes failed with %v, want 503 ServerBusy and 500 OperationTimedOut", seen)
	}
	if _, err := direct.NewClient(name).GetEntity(ctx, "p", "r", nil); err == nil {
		t.Fatal("a write failed before the backend was applied")
	}
	c.SetConfig(contract.Config{Seed: 5, ErrorRate: 1, DefiniteWrites: true})
	for i := 0; i < 10; i++ {
		_, err := under.NewClient(name).AddEntity(ctx, ent, nil)
		if st, code := aztest.Status(err); st != http.StatusServiceUnavailable || code != "ServerBusy" {
			t.Fatalf("DefiniteWrites: %v, want 503 ServerBusy", err)
		}
	}
	c.SetConfig(contract.Config{})
	c.LoseNext(1)
	_, err := under.NewClient(name).AddEntity(ctx, ent, nil)
	if st, code := aztest.Status(err); st != http.StatusInternalServerError || code != "OperationTimedOut" {
		t.Fatalf("a lost reply: %v, want 500 OperationTimedOut", err)
	}
	if _, err := direct.NewClient(name).GetEntity(ctx, "p", "r", nil); err != nil {
		t.Fatalf("the write whose reply was lost: %v, want it applied", err)
	}
}

// TestAzureEmptyPagesNeedTheBackend: an empty page is the service's
// answer, so the contract gives one only when the backend answered the
// query: a backend that cannot be reached fails the query (a cut-off
// node must see its backend gone, not empty pages), and one that refuses
// it (no such table) answers with its own refusal.
func TestAzureEmptyPagesNeedTheBackend(t *testing.T) {
	// Bounded: a contract that answers every page empty continues forever.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := contract.New(contract.Config{Seed: 3, ShortRate: 1, EmptyRate: 1})
	co := &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}, Transport: c.Transport(nil)}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String() + "/" + aztest.Account
	ln.Close() // nothing listens there now
	cut, err := aztables.NewServiceClientFromConnectionString(aztest.ConnectionString(gone, aztest.Key), co)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listEntities(ctx, cut.NewClient("t"), "", 5); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a query of an unreachable backend: %v, want connection refused", err)
	}
	if c.Stats().Empty != 0 {
		t.Errorf("the contract answered %d empty pages for an unreachable backend", c.Stats().Empty)
	}
	reached, err := aztables.NewServiceClientFromConnectionString(aztest.ConnectionString(aztest.Azurite(t), aztest.Key), co)
	if err != nil {
		t.Fatal(err)
	}
	_, err = listEntities(ctx, reached.NewClient(aztest.TableName("none")), "", 5)
	if st, code := aztest.Status(err); st != http.StatusNotFound || code != "TableNotFound" {
		t.Errorf("a query of a missing table: %v, want 404 TableNotFound", err)
	}
	name := aztest.TableName("ep")
	direct := azClient(t, nil, -1)
	if _, err := direct.CreateTable(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.DeleteTable(context.Background(), name, nil) })
	pager := reached.NewClient(name).NewListEntitiesPager(nil)
	page, err := pager.NextPage(ctx)
	if err != nil || len(page.Entities) != 0 || page.NextPartitionKey == nil {
		t.Fatalf("a query of a reachable backend: %v, %d entities, continuation %v; want an empty page that continues", err, len(page.Entities), page.NextPartitionKey)
	}
	if c.Stats().Empty != 1 {
		t.Errorf("empty pages: %d, want 1", c.Stats().Empty)
	}
}

// TestSeedRepeats: one seed, one sequence of calls, the same answers.
func TestSeedRepeats(t *testing.T) {
	project := dstest.Project(t)
	ctx := context.Background()
	direct := dsClient(t, project, nil)
	keys := make([]*datastore.Key, 30)
	for i := range keys {
		keys[i] = datastore.IDKey("K", int64(i+1), nil)
	}
	if _, err := direct.PutMulti(ctx, keys, make([]thing, len(keys))); err != nil {
		t.Fatal(err)
	}
	trace := func() []string {
		c := contract.New(contract.Config{Seed: 99, ShortRate: 0.5, EmptyRate: 0.3, DeferRate: 0.3})
		var out []string
		ic := c.Interceptor()
		record := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := ic(ctx, method, req, reply, cc, invoker, opts...)
			switch r := reply.(type) {
			case *datastorepb.RunQueryResponse:
				out = append(out, fmt.Sprint(len(r.GetBatch().GetEntityResults()), r.GetBatch().GetSkippedResults(), r.GetBatch().GetMoreResults()))
			case *datastorepb.LookupResponse:
				out = append(out, fmt.Sprint(len(r.GetFound()), len(r.GetDeferred())))
			}
			return err
		}
		cl, err := datastore.NewClient(ctx, project, option.WithEndpoint("passthrough:///"+dstest.Emulator(t)), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())), option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(record)))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if _, err := run(ctx, cl, datastore.NewQuery("K").Offset(4)); err != nil {
			t.Fatal(err)
		}
		if err := cl.GetMulti(ctx, keys, make([]thing, len(keys))); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := trace(), trace()
	if !slices.Equal(a, b) || len(a) < 3 {
		t.Errorf("two runs with one seed:\n %v\n %v", a, b)
	}
}

func TestValidate(t *testing.T) {
	if err := contract.Standard(1).Validate(); err != nil {
		t.Error(err)
	}
	err := contract.Config{ShortRate: 2, LostRate: -1}.Validate()
	if !errors.Is(err, contract.ErrInvalid) || !strings.Contains(err.Error(), "ShortRate") || !strings.Contains(err.Error(), "LostRate") {
		t.Errorf("Validate: %v", err)
	}
	if err := (contract.Config{ShortRate: 1}).Validate(); !errors.Is(err, contract.ErrInvalid) {
		t.Errorf("Validate accepted a plan under which no query ever ends: %v", err)
	}
}
