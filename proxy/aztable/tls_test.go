package aztable

import (
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/tlsfront"
)

// TestSDKOverTLS runs one aztables round trip (create a table, add an
// entity, read it back) against nemo served over TLS through tlsserve, as
// listen.tls serves it, in every run: the suites run over TLS only with
// NEMO_TEST_TLS=1 (.ci/test's last pass). The client trusts the test CA
// only; the server must have served the connection over TLS.
func TestSDKOverTLS(t *testing.T) {
	n := overEmbeddedServed(t, true)
	if !strings.HasPrefix(n.URL, "https://") {
		t.Fatalf("nemo over TLS at %s", n.URL)
	}
	svc, err := aztables.NewServiceClientFromConnectionString(aztest.ConnectionString(n.URL, aztest.Key),
		&aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1},
			Transport: &http.Client{Transport: tlsChecked{tlsfront.HTTPClient(0).Transport}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	name := aztest.TableName("tls")
	if _, err := svc.CreateTable(ctx, name, nil); err != nil {
		t.Fatalf("create table over TLS: %v", err)
	}
	tc := svc.NewClient(name)
	if _, err := tc.AddEntity(ctx, entityPR, nil); err != nil {
		t.Fatalf("add entity over TLS: %v", err)
	}
	got, err := tc.GetEntity(ctx, "p", "r", nil)
	if err != nil || !strings.Contains(string(got.Value), `"V":1`) {
		t.Fatalf("get entity over TLS: %s %v", got.Value, err)
	}
	if all, overTLS := n.tls.Served(); overTLS == 0 || overTLS != all {
		t.Fatalf("nemo served %d connections, %d of them over TLS; want all over TLS", all, overTLS)
	}
	// The frontend saw the TLS state (Request.TLS), as behind listen.tls:
	// the entity's metadata URL is https.
	if want := `"odata.metadata":"` + n.base + "/"; !strings.Contains(string(got.Value), want) {
		t.Errorf("entity read over TLS: %s, want %s...", got.Value, want)
	}
}
