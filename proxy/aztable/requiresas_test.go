package aztable

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/remotetest"
)

// serveRemote serves n's API again on a non-loopback address of this
// machine, so that requests to the URL it returns come from a real remote
// peer.
func serveRemote(t *testing.T, n *nemo) string {
	t.Helper()
	ln := remotetest.Listen(t)
	srv := &http.Server{Handler: n.Handler, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/" + aztest.Account
}

// TestRequireSAS drives nemo in front of Azurite with Options.RequireSAS
// through the aztables SDK: from a non-loopback address a Shared Key
// client is refused (403 KeyBasedAuthenticationNotPermitted), and so are
// Shared Key Lite and unsigned requests, while account and table SAS
// clients are served; a Shared Key client on loopback (the pod's own
// application) still is.
func TestRequireSAS(t *testing.T) {
	n := overAzurite(t)
	n.Front.opts.RequireSAS = true
	n.Front.opts.AllowAnonymous = true // require_sas refuses unsigned remote requests even so
	remote := serveRemote(t, n)
	ctx := ctxT(t)

	// Loopback: the Shared Key client is served (freshTable creates and
	// fills the table through it).
	local, cred := keyService(t, n.URL, nil)
	table := freshTable(t, ctx, local, "reqsas")
	if _, err := local.NewClient(table).GetEntity(ctx, "p", "r", nil); err != nil {
		t.Fatalf("Shared Key from loopback: %v", err)
	}

	// Remote: Shared Key refused, whatever the operation.
	keyed, _ := keyService(t, remote, nil)
	_, err := keyed.NewClient(table).GetEntity(ctx, "p", "r", nil)
	wantStatus(t, "remote Shared Key read", err, 403, "KeyBasedAuthenticationNotPermitted")
	_, err = keyed.CreateTable(ctx, aztest.TableName("reqsas"), nil)
	wantStatus(t, "remote Shared Key create table", err, 403, "KeyBasedAuthenticationNotPermitted")
	pager := keyed.NewListTablesPager(nil)
	_, err = pager.NextPage(ctx)
	wantStatus(t, "remote Shared Key list tables", err, 403, "KeyBasedAuthenticationNotPermitted")
	for _, scheme := range []string{"SharedKey", "SharedKeyLite"} {
		resp, body := do(t, signed(t, "GET", remote+"/Tables", "", scheme, true, time.Now()))
		if resp.StatusCode != 403 || resp.Header.Get("x-ms-error-code") != "KeyBasedAuthenticationNotPermitted" ||
			!strings.Contains(body, "Key based authentication is not permitted on this storage account.") {
			t.Errorf("remote %s: %d %s", scheme, resp.StatusCode, body)
		}
	}
	resp, body := do(t, mustRequest(t, "GET", remote+"/Tables"))
	if resp.StatusCode != 403 || resp.Header.Get("x-ms-error-code") != "AuthenticationFailed" {
		t.Errorf("remote unsigned request: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, mustRequest(t, "GET", n.URL+"/Tables"))
	if resp.StatusCode != 200 {
		t.Errorf("loopback unsigned request under allow_anonymous: %d %s", resp.StatusCode, body)
	}

	// Remote: an account SAS client works the table end to end.
	sas := sasService(t, remote, accountSAS(t, cred, "sco", "rwdlacu", nil), nil)
	tc := sas.NewClient(table)
	if got, err := tc.GetEntity(ctx, "p", "r", nil); err != nil || !strings.Contains(string(got.Value), `"V":1`) {
		t.Fatalf("remote account SAS read: %s %v", got.Value, err)
	}
	if _, err := tc.UpsertEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"s","V":2}`), nil); err != nil {
		t.Fatalf("remote account SAS upsert: %v", err)
	}
	if keys := listKeys(t, ctx, tc, nil, 100); len(keys) != 3 {
		t.Fatalf("remote account SAS query: %v, want 3 entities", keys)
	}
	created := aztest.TableName("reqsas")
	if _, err := sas.CreateTable(ctx, created, nil); err != nil {
		t.Fatalf("remote account SAS create table: %v", err)
	}
	if _, err := sas.DeleteTable(ctx, created, nil); err != nil {
		t.Fatalf("remote account SAS delete table: %v", err)
	}

	// Remote: a read-only table SAS reads and may not write.
	remoteSigner, _ := keyService(t, remote, nil) // signs locally; sends nothing
	ro := sasTableClient(t, tableSAS(t, remoteSigner, table, aztables.SASPermissions{Read: true}))
	if _, err := ro.GetEntity(ctx, "p", "s", nil); err != nil {
		t.Fatalf("remote table SAS read: %v", err)
	}
	_, err = ro.DeleteEntity(ctx, "p", "s", nil)
	wantStatus(t, "remote read-only table SAS delete", err, 403, "AuthorizationPermissionMismatch")
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-ms-version", "2019-02-02")
	req.Header.Set("Accept", "application/json;odata=nometadata")
	return req
}
