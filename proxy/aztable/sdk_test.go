package aztable

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/contracttest"
)

// endpoint is one server the SDK scenarios run against.
type endpoint struct {
	name    string
	azurite bool // Azurite itself: its known bugs apply
	start   func(t *testing.T) string
}

// endpoints are nemo over the embedded store, over Azurite, and over
// Azurite under the contract in both coherence modes for each contract
// seed (internal/contracttest), and, last, Azurite itself: the
// scenarios' expectations are the service's, and running them against
// Azurite checks the expectations.
func endpoints(t *testing.T) []endpoint {
	eps := []endpoint{
		{"nemo-embedded", false, func(t *testing.T) string { return overEmbedded(t).URL }},
		{"nemo-azurite", false, func(t *testing.T) string { return overAzurite(t).URL }},
	}
	for _, seed := range contracttest.Seeds(t) {
		eps = append(eps,
			endpoint{fmt.Sprintf("nemo-azurite-contract-%d", seed), false, func(t *testing.T) string { return overContract(t, seed, false).URL }},
			endpoint{fmt.Sprintf("nemo-azurite-shared-contract-%d", seed), false, func(t *testing.T) string { return overContract(t, seed, true).URL }})
	}
	return append(eps, endpoint{"azurite", true, func(t *testing.T) string { return aztest.Azurite(t) }})
}

func forEachEndpoint(t *testing.T, fn func(t *testing.T, url string, azurite bool)) {
	for _, ep := range endpoints(t) {
		t.Run(ep.name, func(t *testing.T) { fn(t, ep.start(t), ep.azurite) })
	}
}

func TestSDKTablesAndEntities(t *testing.T) {
	forEachEndpoint(t, func(t *testing.T, url string, azurite bool) {
		ctx := ctxT(t)
		svc := service(t, url, aztest.Key)
		name := aztest.TableName("sdk")
		_, err := svc.CreateTable(ctx, name, nil)
		wantStatus(t, "create table", err, 0, "")
		defer svc.DeleteTable(ctx, name, nil)
		_, err = svc.CreateTable(ctx, name, nil)
		wantStatus(t, "create table again", err, 409, "TableAlreadyExists")
		_, err = svc.CreateTable(ctx, "a-b", nil)
		if st, _ := aztest.Status(err); st != 400 {
			t.Fatalf("invalid table name: %v", err)
		}
		tc := svc.NewClient(name)

		typed := `{"Bin":"AAEC+g==","Bin@odata.type":"Edm.Binary","Bool":true,"Dbl":3.25,"Guid":"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0","Guid@odata.type":"Edm.Guid","I32":42,"I64":"1234567890123","I64@odata.type":"Edm.Int64","PartitionKey":"pk1","RowKey":"rk1","Str":"hello","When":"2024-05-06T07:08:09.1234567Z","When@odata.type":"Edm.DateTime","Whole":7}`
		add, err := tc.AddEntity(ctx, []byte(typed), nil)
		wantStatus(t, "add", err, 0, "")
		if add.ETag == "" {
			t.Fatal("add returned no ETag")
		}
		_, err = tc.AddEntity(ctx, []byte(typed), nil)
		wantStatus(t, "add duplicate", err, 409, "EntityAlreadyExists")

		got, err := tc.GetEntity(ctx, "pk1", "rk1", nil)
		wantStatus(t, "get", err, 0, "")
		m := decodeMap(t, got.Value)
		want := decodeMap(t, []byte(typed))
		for k, v := range want {
			if !reflect.DeepEqual(m[k], v) {
				t.Errorf("get: %s = %#v, want %#v", k, m[k], v)
			}
		}
		if m["odata.etag"] != string(got.ETag) || got.ETag != add.ETag {
			t.Errorf("ETag header %q, body %v, add %q", got.ETag, m["odata.etag"], add.ETag)
		}
		if _, ok := m["Timestamp"]; !ok {
			t.Error("no Timestamp")
		}
		full, err := tc.GetEntity(ctx, "pk1", "rk1", &aztables.GetEntityOptions{Format: to.Ptr(aztables.MetadataFormatFull)})
		wantStatus(t, "get fullmetadata", err, 0, "")
		fm := decodeMap(t, full.Value)
		if fm["odata.type"] != aztest.Account+"."+name || fm["Timestamp@odata.type"] != "Edm.DateTime" || !strings.HasSuffix(fm["odata.id"].(string), name+"(PartitionKey='pk1',RowKey='rk1')") {
			t.Errorf("fullmetadata: %s", full.Value)
		}
		none, err := tc.GetEntity(ctx, "pk1", "rk1", &aztables.GetEntityOptions{Format: to.Ptr(aztables.MetadataFormatNone)})
		wantStatus(t, "get nometadata", err, 0, "")
		if bytes.Contains(none.Value, []byte("odata.")) {
			t.Errorf("nometadata carries metadata: %s", none.Value)
		}

		_, err = tc.GetEntity(ctx, "pk1", "nope", nil)
		wantStatus(t, "get missing", err, 404, "ResourceNotFound")

		// Upsert merge keeps other properties; replace drops them.
		_, err = tc.UpsertEntity(ctx, []byte(`{"PartitionKey":"pk1","RowKey":"rk1","Str":"merged","Extra":"x"}`), nil)
		wantStatus(t, "upsert merge", err, 0, "")
		got, _ = tc.GetEntity(ctx, "pk1", "rk1", nil)
		m = decodeMap(t, got.Value)
		if m["Str"] != "merged" || m["Extra"] != "x" || m["I32"] != float64(42) {
			t.Fatalf("after merge: %s", got.Value)
		}
		cur := got.ETag
		_, err = tc.UpsertEntity(ctx, []byte(`{"PartitionKey":"pk1","RowKey":"rk3","Only":1}`), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		wantStatus(t, "upsert replace (insert)", err, 0, "")

		upd, err := tc.UpdateEntity(ctx, []byte(`{"PartitionKey":"pk1","RowKey":"rk1","I32":43}`), &aztables.UpdateEntityOptions{IfMatch: &cur, UpdateMode: aztables.UpdateModeMerge})
		wantStatus(t, "update merge with current etag", err, 0, "")
		if upd.ETag == cur || upd.ETag == "" {
			t.Fatalf("update kept the ETag %q", upd.ETag)
		}
		_, err = tc.UpdateEntity(ctx, []byte(`{"PartitionKey":"pk1","RowKey":"rk1","I32":0}`), &aztables.UpdateEntityOptions{IfMatch: &cur, UpdateMode: aztables.UpdateModeMerge})
		wantStatus(t, "update merge with stale etag", err, 412, "UpdateConditionNotSatisfied")
		_, err = tc.UpdateEntity(ctx, []byte(`{"PartitionKey":"pk1","RowKey":"rk1","I32":0}`), &aztables.UpdateEntityOptions{IfMatch: &cur, UpdateMode: aztables.UpdateModeReplace})
		wantStatus(t, "update replace with stale etag", err, 412, "UpdateConditionNotSatisfied")
		_, err = tc.UpdateEntity(ctx, []byte(`{"PartitionKey":"pk1","RowKey":"none","I32":0}`), &aztables.UpdateEntityOptions{IfMatch: to.Ptr(azcore.ETagAny), UpdateMode: aztables.UpdateModeMerge})
		wantStatus(t, "update missing", err, 404, "ResourceNotFound")
		rep, err := tc.UpdateEntity(ctx, []byte(`{"PartitionKey":"pk1","RowKey":"rk1","I32":44}`), &aztables.UpdateEntityOptions{IfMatch: &upd.ETag, UpdateMode: aztables.UpdateModeReplace})
		wantStatus(t, "update replace", err, 0, "")
		got, _ = tc.GetEntity(ctx, "pk1", "rk1", nil)
		if m := decodeMap(t, got.Value); m["I32"] != float64(44) || m["Str"] != nil || got.ETag != rep.ETag {
			t.Fatalf("after replace: %s (etag %q, update said %q)", got.Value, got.ETag, rep.ETag)
		}

		_, err = tc.DeleteEntity(ctx, "pk1", "rk3", &aztables.DeleteEntityOptions{IfMatch: &cur})
		wantStatus(t, "delete stale", err, 412, "UpdateConditionNotSatisfied")
		_, err = tc.DeleteEntity(ctx, "pk1", "rk3", nil)
		wantStatus(t, "delete", err, 0, "")
		_, err = tc.DeleteEntity(ctx, "pk1", "rk3", nil)
		wantStatus(t, "delete again", err, 404, "ResourceNotFound")

		_, err = tc.AddEntity(ctx, []byte(`{"PartitionKey":"a/b","RowKey":"x"}`), nil)
		if azurite {
			// Azurite answers InvalidInput; the service names the key:
			// OutOfRangeInput "The 'PartitionKey' parameter of value 'a/b'
			// is out of range." (TestEntityValidation).
			wantStatus(t, "key with a slash", err, 400, "InvalidInput")
		} else {
			wantStatus(t, "key with a slash", err, 400, "OutOfRangeInput")
		}

		// Table listing: filter and paging.
		for i := 0; i < 3; i++ {
			_, err := svc.CreateTable(ctx, fmt.Sprintf("%sx%d", name, i), nil)
			wantStatus(t, "create", err, 0, "")
			defer svc.DeleteTable(ctx, fmt.Sprintf("%sx%d", name, i), nil)
		}
		filter := fmt.Sprintf("TableName ge '%s' and TableName lt '%sy'", name, name)
		pager := svc.NewListTablesPager(&aztables.ListTablesOptions{Filter: &filter, Top: to.Ptr[int32](2)})
		var names []string
		pages := 0
		for pager.More() {
			p, err := pager.NextPage(ctx)
			wantStatus(t, "list tables", err, 0, "")
			pages++
			for _, tp := range p.Tables {
				names = append(names, *tp.Name)
			}
		}
		wantNames := []string{name, name + "x0", name + "x1", name + "x2"}
		if !reflect.DeepEqual(names, wantNames) || pages != 2 {
			t.Fatalf("tables %v in %d pages, want %v in 2", names, pages, wantNames)
		}

		_, err = svc.DeleteTable(ctx, name, nil)
		wantStatus(t, "delete table", err, 0, "")
		_, err = svc.DeleteTable(ctx, name, nil)
		wantStatus(t, "delete table again", err, 404, "ResourceNotFound")
		_, err = tc.GetEntity(ctx, "pk1", "rk1", nil)
		wantStatus(t, "get in deleted table", err, 404, "TableNotFound")
		_, err = tc.AddEntity(ctx, []byte(`{"PartitionKey":"a","RowKey":"b"}`), nil)
		wantStatus(t, "add to deleted table", err, 404, "TableNotFound")

		bad := service(t, url, "AAAA"+aztest.Key[4:])
		_, err = bad.CreateTable(ctx, aztest.TableName("wrongkey"), nil)
		code := "AuthenticationFailed"
		if azurite {
			code = "AuthorizationFailure" // Azurite's known bug 7
		}
		wantStatus(t, "wrong key", err, 403, code)
	})
}

func TestSDKQueries(t *testing.T) {
	forEachEndpoint(t, func(t *testing.T, url string, _ bool) {
		ctx := ctxT(t)
		svc := service(t, url, aztest.Key)
		name := aztest.TableName("query")
		if _, err := svc.CreateTable(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		defer svc.DeleteTable(ctx, name, nil)
		tc := svc.NewClient(name)
		for i := 0; i < 25; i++ {
			tag := []string{"even", "odd"}[i%2]
			e := fmt.Sprintf(`{"PartitionKey":"range","RowKey":"r%03d","N":%d,"Tag":%q}`, i, i, tag)
			if _, err := tc.UpsertEntity(ctx, []byte(e), nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tc.AddEntity(ctx, []byte(`{"PartitionKey":"other","RowKey":"r000","N":100}`), nil); err != nil {
			t.Fatal(err)
		}
		list := func(opts *aztables.ListEntitiesOptions) ([][]map[string]any, error) {
			var pages [][]map[string]any
			pager := tc.NewListEntitiesPager(opts)
			for pager.More() {
				p, err := pager.NextPage(ctx)
				if err != nil {
					return nil, err
				}
				var page []map[string]any
				for _, e := range p.Entities {
					page = append(page, decodeMap(t, e))
				}
				pages = append(pages, page)
			}
			return pages, nil
		}
		rows := func(pages [][]map[string]any, prop string) string {
			var out []string
			for _, p := range pages {
				var ps []string
				for _, e := range p {
					ps = append(ps, fmt.Sprint(e[prop]))
				}
				out = append(out, strings.Join(ps, ","))
			}
			return strings.Join(out, " | ")
		}

		// The reference query: key range, a non-key predicate, $select
		// and $top paging.
		pages, err := list(&aztables.ListEntitiesOptions{
			Filter: to.Ptr("PartitionKey eq 'range' and RowKey ge 'r005' and RowKey lt 'r020' and Tag eq 'odd'"),
			Select: to.Ptr("RowKey,N,Missing"), Top: to.Ptr[int32](4),
		})
		wantStatus(t, "range query", err, 0, "")
		if got := rows(pages, "RowKey"); got != "r005,r007,r009,r011 | r013,r015,r017,r019" {
			t.Fatalf("pages %s", got)
		}
		first := pages[0][0]
		if first["N"] != float64(5) || first["odata.etag"] == nil || first["Tag"] != nil || first["PartitionKey"] != nil {
			t.Fatalf("$select: %v", first)
		}

		for _, tc := range []struct{ filter, want string }{
			{"", "range/r000"},
			{"PartitionKey eq 'other'", "100"},
			{"N gt 22", "100,23,24"}, // partition "other" sorts first
			{"N gt 22 and PartitionKey eq 'range'", "23,24"},
			{"RowKey eq 'r000'", "100,0"},
			{"(N eq 1 or N eq 2) and not (Tag eq 'odd')", "2"},
			{"Missing eq 'x'", ""},
		} {
			pages, err := list(&aztables.ListEntitiesOptions{Filter: to.Ptr(tc.filter)})
			wantStatus(t, tc.filter, err, 0, "")
			if tc.filter == "" {
				if n := len(pages[0]); n != 26 || pages[0][0]["PartitionKey"] != "other" {
					t.Fatalf("all rows: %d, first %v", n, pages[0][0])
				}
				continue
			}
			if got := rows(pages, "N"); got != tc.want {
				t.Errorf("%s: %q, want %q", tc.filter, got, tc.want)
			}
		}
		_, err = list(&aztables.ListEntitiesOptions{Filter: to.Ptr("PartitionKey eq")})
		wantStatus(t, "invalid filter", err, 400, "InvalidInput")
	})
}

func TestSDKTransactions(t *testing.T) {
	forEachEndpoint(t, func(t *testing.T, url string, _ bool) {
		ctx := ctxT(t)
		svc := service(t, url, aztest.Key)
		name := aztest.TableName("batch")
		if _, err := svc.CreateTable(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		defer svc.DeleteTable(ctx, name, nil)
		tc := svc.NewClient(name)
		for _, rk := range []string{"del", "upd"} {
			if _, err := tc.AddEntity(ctx, []byte(`{"PartitionKey":"batch","RowKey":"`+rk+`","V":0}`), nil); err != nil {
				t.Fatal(err)
			}
		}
		upd, _ := tc.GetEntity(ctx, "batch", "upd", nil)
		ent := func(rk string, v int) []byte {
			return []byte(fmt.Sprintf(`{"PartitionKey":"batch","RowKey":%q,"V":%d}`, rk, v))
		}
		_, err := tc.SubmitTransaction(ctx, []aztables.TransactionAction{
			{ActionType: aztables.TransactionTypeAdd, Entity: ent("a1", 1)},
			{ActionType: aztables.TransactionTypeAdd, Entity: []byte(`{"Big":"1099511627776","Big@odata.type":"Edm.Int64","PartitionKey":"batch","RowKey":"a2"}`)},
			{ActionType: aztables.TransactionTypeInsertMerge, Entity: ent("m1", 3)},
			{ActionType: aztables.TransactionTypeInsertReplace, Entity: ent("r1", 4)},
			{ActionType: aztables.TransactionTypeUpdateMerge, Entity: ent("upd", 5), IfMatch: &upd.ETag},
			{ActionType: aztables.TransactionTypeDelete, Entity: ent("del", 0)},
		}, nil)
		wantStatus(t, "transaction", err, 0, "")

		// A failing operation rolls back the whole changeset.
		_, err = tc.SubmitTransaction(ctx, []aztables.TransactionAction{
			{ActionType: aztables.TransactionTypeAdd, Entity: ent("b1", 1)},
			{ActionType: aztables.TransactionTypeAdd, Entity: ent("a1", 1)},
			{ActionType: aztables.TransactionTypeUpdateMerge, Entity: ent("m1", 9)},
		}, nil)
		st, _ := aztest.Status(err)
		if st != http.StatusAccepted || !strings.Contains(err.Error(), "1:The specified entity already exists.") || !strings.Contains(err.Error(), "EntityAlreadyExists") {
			t.Fatalf("failing transaction: %v", err)
		}
		_, err = tc.GetEntity(ctx, "batch", "b1", nil)
		wantStatus(t, "b1 after the failed transaction", err, 404, "ResourceNotFound")
		_, err = tc.SubmitTransaction(ctx, []aztables.TransactionAction{
			{ActionType: aztables.TransactionTypeUpdateMerge, Entity: ent("upd", 6), IfMatch: &upd.ETag},
		}, nil)
		if st, _ := aztest.Status(err); st != http.StatusAccepted || !strings.Contains(err.Error(), "0:The update condition specified in the request was not satisfied.") {
			t.Fatalf("stale If-Match in a transaction: %v", err)
		}

		pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: to.Ptr("PartitionKey eq 'batch'"), Select: to.Ptr("RowKey,V,Big")})
		p, err := pager.NextPage(ctx)
		wantStatus(t, "list", err, 0, "")
		var got []string
		for _, e := range p.Entities {
			m := decodeMap(t, e)
			got = append(got, fmt.Sprintf("%v=%v%v", m["RowKey"], m["V"], m["Big"]))
		}
		want := []string{"a1=1<nil>", "a2=<nil>1099511627776", "m1=3<nil>", "r1=4<nil>", "upd=5<nil>"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after transactions: %v, want %v", got, want)
		}
	})
}

// TestTransactionLimits checks what Azurite gets wrong (known bugs 5 and 6),
// so it runs against nemo only.
func TestTransactionLimits(t *testing.T) {
	n := overEmbedded(t)
	ctx := ctxT(t)
	svc := service(t, n.URL, aztest.Key)
	name := aztest.TableName("limits")
	if _, err := svc.CreateTable(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	tc := svc.NewClient(name)
	var acts []aztables.TransactionAction
	for i := 0; i < 101; i++ {
		acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace, Entity: []byte(fmt.Sprintf(`{"PartitionKey":"p","RowKey":"%03d"}`, i))})
	}
	_, err := tc.SubmitTransaction(ctx, acts, nil)
	if st, _ := aztest.Status(err); st != http.StatusAccepted || !strings.Contains(err.Error(), "100:The batch request operation exceeds the maximum 100 changes per change set.") {
		t.Fatalf("101 operations: %v", err)
	}
	_, err = tc.SubmitTransaction(ctx, acts[:100], nil)
	wantStatus(t, "100 operations", err, 0, "")

	_, err = tc.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeInsertMerge, Entity: []byte(`{"PartitionKey":"p","RowKey":"x1"}`)},
		{ActionType: aztables.TransactionTypeInsertMerge, Entity: []byte(`{"PartitionKey":"q","RowKey":"x2"}`)},
	}, nil)
	if st, _ := aztest.Status(err); st != http.StatusAccepted || !strings.Contains(err.Error(), "CommandsInBatchActOnDifferentPartitions") || !strings.Contains(err.Error(), "1:All commands") {
		t.Fatalf("two partitions: %v", err)
	}
	_, err = tc.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeInsertMerge, Entity: []byte(`{"PartitionKey":"p","RowKey":"x1"}`)},
		{ActionType: aztables.TransactionTypeDelete, Entity: []byte(`{"PartitionKey":"p","RowKey":"x1"}`)},
	}, nil)
	if st, _ := aztest.Status(err); st != http.StatusAccepted || !strings.Contains(err.Error(), "InvalidDuplicateRow") {
		t.Fatalf("duplicate row: %v", err)
	}
	if _, err := tc.GetEntity(ctx, "p", "x1", nil); err == nil {
		t.Fatal("a refused transaction wrote x1")
	}

	big := strings.Repeat("x", 30000)
	_, err = tc.AddEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "big", "A": big, "B": big, "C": big, "D": big, "E": big, "F": big, "G": big, "H": big, "I": big, "J": big, "K": big, "L": big, "M": big, "N": big, "O": big, "P": big, "Q": big, "R": big}), nil)
	wantStatus(t, "entity over 1 MiB", err, 400, "EntityTooLarge")
	var huge bytes.Buffer
	huge.WriteString(`{"PartitionKey":"p","RowKey":"huge"`)
	for i := 0; i < 150; i++ {
		fmt.Fprintf(&huge, `,"P%d":%q`, i, big)
	}
	huge.WriteString("}")
	_, err = tc.AddEntity(ctx, huge.Bytes(), nil)
	wantStatus(t, "body over 4 MiB", err, 413, "RequestBodyTooLarge")
	var js map[string]any
	if json.Unmarshal(huge.Bytes(), &js) != nil {
		t.Fatal("the huge body is not JSON")
	}
}
