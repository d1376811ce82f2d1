package aztable

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	azstore "github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
)

// pkSide is one endpoint the empty-PartitionKey sequence runs against,
// with the ETag each key last answered with there.
type pkSide struct {
	url, table string
	tc         *aztables.Client
	etags      map[string]string
	stale      map[string]string // an ETag the key had before its latest write
}

// entityURL is the side's address of the entity (pk "", rk).
func (s *pkSide) entityURL(rk string) string {
	return fmt.Sprintf("%s/%s(PartitionKey='',RowKey='%s')", s.url, s.table, url.PathEscape(rk))
}

// send sends a hand-signed request (the SDK sends no point write with an
// empty PartitionKey) and returns its status and error code, keeping the
// ETag it answers with for rk.
func (s *pkSide) send(t *testing.T, method, target, rk, ifMatch, contentType, body string) string {
	t.Helper()
	req := signed(t, method, target, body, "SharedKeyLite", true, time.Now())
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if e := resp.Header.Get("ETag"); e != "" && rk != "" {
		s.stale[rk], s.etags[rk] = s.etags[rk], e
	}
	out := fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("x-ms-error-code"))
	if resp.StatusCode == http.StatusAccepted { // a transaction: the status of each operation
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "HTTP/1.1 ") {
				out += " | " + strings.TrimSpace(strings.TrimPrefix(line, "HTTP/1.1 "))
			}
		}
	}
	return out
}

// batch sends a $batch of the given operations (method, row key,
// If-Match, body) on partition "".
func (s *pkSide) batch(t *testing.T, ops [][4]string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("--batch_e\r\nContent-Type: multipart/mixed; boundary=changeset_e\r\n\r\n")
	for _, o := range ops {
		target := s.entityURL(o[1])
		if o[0] == http.MethodPost {
			target = s.url + "/" + s.table
		}
		fmt.Fprintf(&b, "--changeset_e\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n%s %s HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\nDataServiceVersion: 3.0\r\n", o[0], target)
		if o[2] != "" {
			fmt.Fprintf(&b, "If-Match: %s\r\n", o[2])
		}
		if o[3] != "" {
			b.WriteString("Content-Type: application/json\r\n")
		}
		fmt.Fprintf(&b, "\r\n%s\r\n", o[3])
	}
	b.WriteString("--changeset_e--\r\n--batch_e--\r\n")
	return s.send(t, http.MethodPost, s.url+"/$batch", "", "", "multipart/mixed; boundary=batch_e", b.String())
}

// sdkInserts sends, through the SDK, a transaction inserting the rows rks
// of partition "" (an insert is the one operation on that partition the
// SDK sends) and returns its status and error code.
func (s *pkSide) sdkInserts(ctx context.Context, rks ...string) string {
	acts := make([]aztables.TransactionAction, len(rks))
	for i, rk := range rks {
		acts[i] = aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: []byte(fmt.Sprintf(`{"PartitionKey":"","RowKey":%q,"N":%d}`, rk, i))}
	}
	_, err := s.tc.SubmitTransaction(ctx, acts, nil)
	o := errOutcome(err)
	return fmt.Sprint(o.Status, " ", o.Code)
}

// sasStore is nemo's store of Azurite opened with a SAS connection string
// (an account SAS granting everything), with Options.ETagMemory
// etagMemory.
func sasStore(t testing.TB, etagMemory int) *azstore.Store {
	t.Helper()
	az := aztest.Azurite(t)
	_, cred := keyService(t, az, nil)
	cs := "TableEndpoint=" + az + ";SharedAccessSignature=" + accountSAS(t, cred, "sco", "rwdlacu", nil)
	st, err := azstore.New(azstore.Options{ConnectionString: cs, Logger: quiet, ETagMemory: etagMemory})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestEmptyPartitionKey: a client inserts, replaces, merges, deletes and
// batches entities whose PartitionKey is empty (one with an empty RowKey
// too), with right and stale ETags, through nemo in front of Azurite in
// both coherence modes, its store authenticated with the account key or
// with a SAS connection string, and directly against Azurite: every
// answer has the same status, and after a flush Azurite holds in nemo's
// table exactly what it holds in the table written directly. (The
// aztables SDK refuses to send these point writes; the adapter sends them
// itself, and in mode exclusive the flush is where an acknowledged write
// would be stuck if it could not.)
func TestEmptyPartitionKey(t *testing.T) {
	for _, mode := range []struct {
		name   string
		shared bool
		store  func(t testing.TB, etagMemory int) *azstore.Store
	}{
		{"exclusive", false, azuriteStoreMemo}, {"shared", true, azuriteStoreMemo},
		{"exclusive/sas", false, sasStore}, {"shared/sas", true, sasStore},
	} {
		shared := mode.shared
		t.Run(mode.name, func(t *testing.T) {
			ctx := ctxT(t)
			az := aztest.Azurite(t)
			direct := service(t, az, aztest.Key)
			names := []string{aztest.TableName("emptypk"), aztest.TableName("emptypk")}
			t.Cleanup(func() { // after nemo has checked its buffer
				for _, name := range names {
					_, _ = direct.DeleteTable(context.Background(), name, nil)
				}
			})
			var n *nemo
			if shared { // as the node opens the store in mode shared: no ETag memory
				n = inSharedAccount(startShared(t, mode.store(t, -1), cache.Options{}))
			} else {
				n = inSharedAccount(startNemo(t, mode.store(t, 0), cache.Options{}))
			}
			viaNemo := service(t, n.URL, aztest.Key)
			var sides []*pkSide
			for i, tgt := range []struct {
				url string
				svc *aztables.ServiceClient
			}{{az, direct}, {n.URL, viaNemo}} {
				if _, err := tgt.svc.CreateTable(ctx, names[i], nil); err != nil {
					t.Fatal(err)
				}
				sides = append(sides, &pkSide{url: tgt.url, table: names[i], tc: tgt.svc.NewClient(names[i]), etags: map[string]string{}, stale: map[string]string{}})
			}
			steps := []struct {
				name string
				run  func(s *pkSide) string
			}{
				{"insert a", func(s *pkSide) string {
					return s.send(t, http.MethodPost, s.url+"/"+s.table, "a", "", "", `{"PartitionKey":"","RowKey":"a","N":1}`)
				}},
				{"insert empty row", func(s *pkSide) string {
					return s.send(t, http.MethodPost, s.url+"/"+s.table, "", "", "", `{"PartitionKey":"","RowKey":"","N":2}`)
				}},
				{"insert a again", func(s *pkSide) string {
					return s.send(t, http.MethodPost, s.url+"/"+s.table, "a", "", "", `{"PartitionKey":"","RowKey":"a","N":9}`)
				}},
				{"upsert a", func(s *pkSide) string {
					return s.send(t, http.MethodPut, s.entityURL("a"), "a", "", "", `{"PartitionKey":"","RowKey":"a","N":3,"D":2.0}`)
				}},
				{"merge a at its ETag", func(s *pkSide) string {
					return s.send(t, "MERGE", s.entityURL("a"), "a", s.etags["a"], "", `{"PartitionKey":"","RowKey":"a","M":"x"}`)
				}},
				{"replace a at a stale ETag", func(s *pkSide) string {
					return s.send(t, http.MethodPut, s.entityURL("a"), "a", s.stale["a"], "", `{"PartitionKey":"","RowKey":"a","N":8}`)
				}},
				{"merge b (insert-or-merge)", func(s *pkSide) string {
					return s.send(t, "MERGE", s.entityURL("b"), "b", "", "", `{"PartitionKey":"","RowKey":"b","S":"b"}`)
				}},
				{"delete b at a stale ETag", func(s *pkSide) string {
					return s.send(t, http.MethodDelete, s.entityURL("b"), "b", staleETag, "", "")
				}},
				{"delete b at its ETag", func(s *pkSide) string {
					return s.send(t, http.MethodDelete, s.entityURL("b"), "b", s.etags["b"], "", "")
				}},
				{"delete absent b", func(s *pkSide) string { return s.send(t, http.MethodDelete, s.entityURL("b"), "b", "*", "", "") }},
				{"replace empty row at its ETag", func(s *pkSide) string {
					return s.send(t, http.MethodPut, s.entityURL(""), "", s.etags[""], "", `{"PartitionKey":"","RowKey":"","N":4}`)
				}},
				{"SDK transaction of inserts", func(s *pkSide) string { return s.sdkInserts(ctx, "c", "d") }},
				{"SDK transaction inserting an existing entity", func(s *pkSide) string { return s.sdkInserts(ctx, "e", "c") }},
				{"transaction of replace, merge, delete", func(s *pkSide) string {
					return s.batch(t, [][4]string{
						{http.MethodPut, "c", "", `{"PartitionKey":"","RowKey":"c","N":10}`},
						{"MERGE", "", "*", `{"PartitionKey":"","RowKey":"","Z":true}`},
						{http.MethodDelete, "d", "*", ""},
						{http.MethodPost, "f", "", `{"PartitionKey":"","RowKey":"f","N":11}`},
					})
				}},
				{"transaction with a stale ETag", func(s *pkSide) string {
					return s.batch(t, [][4]string{
						{http.MethodPut, "g", "", `{"PartitionKey":"","RowKey":"g","N":12}`},
						{http.MethodDelete, "a", staleETag, ""},
					})
				}},
			}
			for _, step := range steps {
				want := step.run(sides[0])
				if got := step.run(sides[1]); got != want {
					t.Errorf("%s: nemo answered %s, Azurite %s", step.name, got, want)
				}
			}
			throughNemo, err := queryAll(ctx, sides[1].tc, "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Eng.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			want, err := queryAll(ctx, direct.NewClient(sides[0].table), "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			got, err := queryAll(ctx, direct.NewClient(sides[1].table), "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) != 1 || len(want[0]) != 4 {
				t.Fatalf("the sequence left %v in Azurite, want the entities '', a, c and f", want)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("after the flush, nemo's table in Azurite holds\n%v\nthe table written directly\n%v", got, want)
			}
			if !reflect.DeepEqual(throughNemo, want) {
				t.Errorf("nemo lists\n%v\nthe table written directly holds\n%v", throughNemo, want)
			}
		})
	}
}
