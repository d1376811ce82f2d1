package aztable

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/internal/aztest"
)

// TestMethodTunnelling: a POST to an entity naming MERGE, DELETE or PUT
// in X-HTTP-Method (OData's method tunnelling, which the older .NET Table
// SDKs use for every merge) merges, deletes or replaces the entity, as
// Azure and Azurite take it; before, nemo answered 405. MERGE and DELETE
// run against Azurite too, the answers compared; PUT (which Azurite 3.37
// refuses with 400 PropertiesNeedValue, taking the POST as an insert) is
// nemo's alone.
func TestMethodTunnelling(t *testing.T) {
	targets := map[string]string{"azurite": aztest.Azurite(t), "nemo-embedded": overEmbedded(t).URL, "nemo-azurite": overAzurite(t).URL}
	answers := map[string][]string{}
	for name, url := range targets {
		table := aztest.TableName("tunnel" + strings.ReplaceAll(name, "-", ""))
		svc := service(t, url, aztest.Key)
		ctx := context.Background()
		if _, err := svc.CreateTable(ctx, table, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = svc.DeleteTable(context.Background(), table, nil) })
		tc := svc.NewClient(table)
		if _, err := tc.UpsertEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r","A":1,"B":2}`), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
			t.Fatal(err)
		}
		entity := url + "/" + table + "(PartitionKey='p',RowKey='r')"
		tunnel := func(verb, body string) string {
			req := signed(t, http.MethodPost, entity, body, "SharedKey", true, time.Now())
			req.Header.Set("X-HTTP-Method", verb)
			req.Header.Set("If-Match", "*")
			resp, text := do(t, req)
			return resp.Status + " " + text + " then " + readEntity(t, tc)
		}
		answers[name] = append(answers[name], tunnel("MERGE", `{"A":10}`), tunnel("DELETE", ""))
		if name != "azurite" {
			if _, err := tc.UpsertEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r","A":1,"B":2}`), nil); err != nil {
				t.Fatal(err)
			}
			if got, want := tunnel("PUT", `{"C":3}`), "204 No Content  then C=3"; got != want {
				t.Errorf("%s: PUT tunnelled: %s, want %s", name, got, want)
			}
		}
	}
	want := []string{"204 No Content  then A=10 B=2", "204 No Content  then absent"}
	for name, got := range answers {
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: tunnelled MERGE, DELETE answered\n%s\nwant\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// readEntity is p/r's properties other than its keys and Timestamp, as
// "name=value" sorted, or "absent".
func readEntity(t *testing.T, tc *aztables.Client) string {
	t.Helper()
	resp, err := tc.GetEntity(context.Background(), "p", "r", nil)
	if err != nil {
		if _, code := aztest.Status(err); code == "ResourceNotFound" {
			return "absent"
		}
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(resp.Value, &m); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "PartitionKey" && k != "RowKey" && k != "Timestamp" && !strings.HasPrefix(k, "odata.") {
			b, _ := json.Marshal(m[k])
			out = append(out, k+"="+string(b))
		}
	}
	return strings.Join(out, " ")
}
