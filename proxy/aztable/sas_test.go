package aztable

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/internal/aztest"
)

// The SAS tests drive nemo with the aztables SDK's own SAS machinery:
// tokens come from its signers (ServiceClient.GetAccountSASURL,
// Client.GetTableSASURL, AccountSASSignatureValues.Sign) and requests
// from its no-credential clients, which send the token in every URL.

// sasClientOptions turns retries off so that every refusal is seen.
var sasClientOptions = aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}, Transport: sdkTransport}}

// keyService is a Shared Key client of the service at url (no trailing
// slash), the one that signs tokens; its Client.GetTableSASURL needs the
// trailing slash it adds.
func keyService(t testing.TB, url string, transport policy.Transporter) (*aztables.ServiceClient, *aztables.SharedKeyCredential) {
	t.Helper()
	cred, err := aztables.NewSharedKeyCredential(aztest.Account, aztest.Key)
	if err != nil {
		t.Fatal(err)
	}
	o := sasClientOptions
	if transport != nil {
		o.Transport = transport
	}
	svc, err := aztables.NewServiceClientWithSharedKey(url+"/", cred, &o)
	if err != nil {
		t.Fatal(err)
	}
	return svc, cred
}

// sasService is a client of the service at url holding only token.
func sasService(t testing.TB, url, token string, transport policy.Transporter) *aztables.ServiceClient {
	t.Helper()
	o := sasClientOptions
	if transport != nil {
		o.Transport = transport
	}
	svc, err := aztables.NewServiceClientWithNoCredential(url+"/?"+token, &o)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// sasTableClient is a client of one table holding only a table SAS URL.
func sasTableClient(t testing.TB, sasURL string) *aztables.Client {
	t.Helper()
	c, err := aztables.NewClientWithNoCredential(sasURL, &sasClientOptions)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// accountSAS signs an account SAS for the table service valid over HTTP
// and HTTPS from an hour ago to an hour ahead; edit adjusts the values.
func accountSAS(t testing.TB, cred *aztables.SharedKeyCredential, srt, sp string, edit func(*aztables.AccountSASSignatureValues)) string {
	t.Helper()
	now := time.Now().UTC()
	v := aztables.AccountSASSignatureValues{
		Protocol: aztables.SASProtocolHTTPSandHTTP, StartTime: now.Add(-time.Hour), ExpiryTime: now.Add(time.Hour),
		Permissions: sp, Services: "t", ResourceTypes: srt,
	}
	if edit != nil {
		edit(&v)
	}
	qp, err := v.Sign(cred)
	if err != nil {
		t.Fatal(err)
	}
	return qp.Encode()
}

// tableSAS is Client.GetTableSASURL for table, valid from an hour ago to
// an hour ahead. The SDK (v1.4.1) signs the key range of perms but leaves
// spk, srk, epk and erk out of the URL it returns, so such a URL fails
// everywhere; tableSAS appends them: the signature already covers them.
func tableSAS(t testing.TB, svc *aztables.ServiceClient, table string, perms aztables.SASPermissions) string {
	t.Helper()
	now := time.Now().UTC()
	u, err := svc.NewClient(table).GetTableSASURL(perms, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"spk", perms.StartPartitionKey}, {"srk", perms.StartRowKey}, {"epk", perms.EndPartitionKey}, {"erk", perms.EndRowKey}} {
		if kv[1] != "" && !strings.Contains(u, "&"+kv[0]+"=") {
			u += "&" + kv[0] + "=" + url.QueryEscape(kv[1])
		}
	}
	return u
}

// sasOp is one Table operation run through a SAS client of table, on
// whose entity ("p", "r") it acts.
type sasOp struct {
	name string
	srt  string   // the account SAS resource type it needs
	need []string // account SAS permission sets that grant it; none: never granted
	run  func(ctx context.Context, svc *aztables.ServiceClient, table string) error
}

var entityPR = []byte(`{"PartitionKey":"p","RowKey":"r","V":1}`)

var sasOps = []sasOp{
	{"get service properties", "s", []string{"r"}, func(ctx context.Context, svc *aztables.ServiceClient, _ string) error {
		_, err := svc.GetProperties(ctx, nil)
		return err
	}},
	{"set service properties", "s", []string{"w"}, func(ctx context.Context, svc *aztables.ServiceClient, _ string) error {
		_, err := svc.SetProperties(ctx, aztables.ServiceProperties{}, nil)
		return err
	}},
	{"get service stats", "s", []string{"r"}, func(ctx context.Context, svc *aztables.ServiceClient, _ string) error {
		_, err := svc.GetStatistics(ctx, nil)
		return err
	}},
	{"query tables", "c", []string{"l"}, func(ctx context.Context, svc *aztables.ServiceClient, _ string) error {
		_, err := svc.NewListTablesPager(nil).NextPage(ctx)
		return err
	}},
	{"create table", "c", []string{"c", "w"}, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.CreateTable(ctx, table+"x", nil)
		return err
	}},
	{"delete table", "c", []string{"d"}, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.DeleteTable(ctx, table, nil)
		return err
	}},
	{"get table ACL", "c", nil, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.NewClient(table).GetAccessPolicy(ctx, nil)
		return err
	}},
	{"set table ACL", "c", nil, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.NewClient(table).SetAccessPolicy(ctx, nil)
		return err
	}},
	{"get entity", "o", []string{"r"}, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.NewClient(table).GetEntity(ctx, "p", "r", nil)
		return err
	}},
	{"query entities", "o", []string{"r"}, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.NewClient(table).NewListEntitiesPager(nil).NextPage(ctx)
		return err
	}},
	{"insert entity", "o", []string{"a"}, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.NewClient(table).AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"new"}`), nil)
		return err
	}},
	{"update entity", "o", []string{"u"}, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.NewClient(table).UpdateEntity(ctx, entityPR, &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		return err
	}},
	{"merge entity", "o", []string{"u"}, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.NewClient(table).UpdateEntity(ctx, entityPR, nil)
		return err
	}},
	{"insert or replace entity", "o", []string{"au"}, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.NewClient(table).UpsertEntity(ctx, entityPR, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		return err
	}},
	{"insert or merge entity", "o", []string{"au"}, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.NewClient(table).UpsertEntity(ctx, entityPR, nil)
		return err
	}},
	{"delete entity", "o", []string{"d"}, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.NewClient(table).DeleteEntity(ctx, "p", "r", nil)
		return err
	}},
	{"transaction", "o", []string{"adu"}, func(ctx context.Context, svc *aztables.ServiceClient, table string) error {
		_, err := svc.NewClient(table).SubmitTransaction(ctx, []aztables.TransactionAction{
			{ActionType: aztables.TransactionTypeAdd, Entity: []byte(`{"PartitionKey":"p","RowKey":"new"}`)},
			{ActionType: aztables.TransactionTypeUpdateMerge, Entity: entityPR},
			{ActionType: aztables.TransactionTypeDelete, Entity: []byte(`{"PartitionKey":"p","RowKey":"gone"}`)},
		}, nil)
		return err
	}},
}

// sasOutcome is the status and error code an operation got, with the
// failing index for a refused transaction ("Code@index").
func sasOutcome(err error) string {
	o := errOutcome(err)
	return fmt.Sprintf("%d %s", o.Status, o.Code)
}

// freshTable creates a table holding the entities ("p", "r") and ("p",
// "gone") through the Shared Key client.
func freshTable(t *testing.T, ctx context.Context, svc *aztables.ServiceClient, prefix string) string {
	t.Helper()
	name := aztest.TableName(prefix)
	if _, err := svc.CreateTable(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{string(entityPR), `{"PartitionKey":"p","RowKey":"gone"}`} {
		if _, err := svc.NewClient(name).AddEntity(ctx, []byte(e), nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = svc.DeleteTable(context.Background(), name, nil) })
	return name
}

// TestSASAccountPermissions runs every operation with account SAS tokens
// granting exactly what it needs, everything but its permission, and
// everything but its resource type.
func TestSASAccountPermissions(t *testing.T) {
	n := overEmbedded(t)
	ctx := ctxT(t)
	svc, cred := keyService(t, n.URL, nil)
	const allPerms = "rwdlacup"
	for _, op := range sasOps {
		t.Run(op.name, func(t *testing.T) {
			type try struct {
				srt, sp, want string
			}
			var tries []try
			for _, sp := range op.need {
				tries = append(tries, try{op.srt, sp, "0 "})
			}
			without := allPerms
			for _, sp := range op.need {
				without = strings.Map(func(r rune) rune {
					if strings.ContainsRune(sp, r) && len(sp) == 1 {
						return -1
					}
					return r
				}, without)
			}
			if len(op.need) == 1 && len(op.need[0]) > 1 {
				// Every one of several required permissions is needed.
				for _, r := range op.need[0] {
					sp := strings.ReplaceAll(op.need[0], string(r), "")
					tries = append(tries, try{op.srt, sp, permissionRefusal(op, sp)})
				}
			} else {
				tries = append(tries, try{op.srt, without, permissionRefusal(op, without)})
			}
			tries = append(tries, try{strings.ReplaceAll("sco", op.srt, ""), allPerms, resourceTypeRefusal(op)})
			for _, tr := range tries {
				table := freshTable(t, ctx, svc, "sasacct")
				token := accountSAS(t, cred, tr.srt, tr.sp, nil)
				if got := sasOutcome(op.run(ctx, sasService(t, n.URL, token, nil), table)); got != tr.want {
					t.Errorf("srt=%s sp=%s: got %s, want %s", tr.srt, tr.sp, got, tr.want)
				}
			}
		})
	}
}

// permissionRefusal is what an operation gets from a SAS that lacks its
// permission, sp being the permissions the SAS has. A transaction refuses
// its first operation sp does not grant (its operations need a, u, d in
// turn), inside the changeset.
func permissionRefusal(op sasOp, sp string) string {
	if op.name == "transaction" {
		return fmt.Sprintf("202 AuthorizationPermissionMismatch@%d", strings.IndexFunc("aud", func(r rune) bool { return !strings.ContainsRune(sp, r) }))
	}
	return "403 AuthorizationPermissionMismatch"
}

func resourceTypeRefusal(op sasOp) string {
	if op.name == "transaction" {
		return "202 AuthorizationResourceTypeMismatch@0"
	}
	return "403 AuthorizationResourceTypeMismatch"
}

// TestSASAccountFromSDK uses ServiceClient.GetAccountSASURL, whose tokens
// are valid over HTTPS only: nemo served over TLS accepts them, over plain
// HTTP it refuses them as the service does, unless told to accept them.
func TestSASAccountFromSDK(t *testing.T) {
	n := overEmbedded(t)
	ctx := ctxT(t)
	// Over nemo's own TLS with NEMO_TEST_TLS=1, else over httptest's.
	tlsURL, tlsClient := n.URL, sdkTransport
	if n.tls == nil {
		tlsSrv := httptest.NewTLSServer(n.Handler)
		defer tlsSrv.Close()
		tlsURL, tlsClient = tlsSrv.URL+"/"+aztest.Account, tlsSrv.Client()
	}
	svc, _ := keyService(t, tlsURL, tlsClient)
	now := time.Now()
	sasURL, err := svc.GetAccountSASURL(aztables.AccountSASResourceTypes{Service: true, Container: true, Object: true},
		aztables.AccountSASPermissions{Read: true, Write: true, Delete: true, List: true, Add: true, Create: true, Update: true}, now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	token := sasURL[strings.Index(sasURL, "?")+1:]
	if !strings.Contains(token, "spr=https&") {
		t.Fatalf("the SDK's account SAS is not HTTPS-only any more: %s", token)
	}
	name := aztest.TableName("sassdk")
	over := sasService(t, tlsURL, token, tlsClient)
	if _, err := over.CreateTable(ctx, name, nil); err != nil {
		t.Fatalf("create table over HTTPS: %v", err)
	}
	tc := over.NewClient(name)
	if _, err := tc.AddEntity(ctx, entityPR, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := tc.GetEntity(ctx, "p", "r", nil); err != nil || !strings.Contains(string(got.Value), `"V":1`) {
		t.Fatalf("get over HTTPS: %s %v", got.Value, err)
	}

	// Plaintext on purpose: a client of its own (the harness's refuses
	// plaintext to a nemo served over TLS).
	plain := sasService(t, n.plainURL, token, &http.Client{})
	_, err = plain.NewClient(name).GetEntity(ctx, "p", "r", nil)
	wantStatus(t, "HTTPS-only SAS over HTTP", err, 403, "AuthorizationProtocolMismatch")
	n.Front.opts.SASAcceptHTTP = true
	_, err = plain.NewClient(name).GetEntity(ctx, "p", "r", nil)
	wantStatus(t, "HTTPS-only SAS over HTTP, accepted", err, 0, "")
}

// TestSASRefusals covers the signature, its validity period, its address
// and its fields: each refusal is a 403 with the service's error body.
func TestSASRefusals(t *testing.T) {
	n := overEmbedded(t)
	ctx := ctxT(t)
	svc, cred := keyService(t, n.URL, nil)
	table := freshTable(t, ctx, svc, "sasref")
	now := time.Now().UTC()
	other, err := aztables.NewSharedKeyCredential("otheraccount", aztest.Key)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := aztables.NewSharedKeyCredential(aztest.Account, "b3RoZXJrZXk=")
	if err != nil {
		t.Fatal(err)
	}
	good := accountSAS(t, cred, "sco", "rl", nil)
	tamper := func(param, val string) string {
		q, _ := url.ParseQuery(good)
		q.Set(param, val)
		return q.Encode()
	}
	tableURL := tableSAS(t, svc, table, aztables.SASPermissions{Read: true})
	for _, tc := range []struct {
		name, token string
		want        string
	}{
		{"valid", good, "0 "},
		{"wrong signature", tamper("sig", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="), "403 AuthenticationFailed"},
		{"signature not base64", tamper("sig", "%%%"), "403 AuthenticationFailed"},
		{"wrong key", accountSAS(t, otherKey, "sco", "rl", nil), "403 AuthenticationFailed"},
		{"wrong account", accountSAS(t, other, "sco", "rl", nil), "403 AuthenticationFailed"},
		{"tampered permissions", tamper("sp", "rwdl"), "403 AuthenticationFailed"},
		{"tampered expiry", tamper("se", now.Add(48*time.Hour).Format(time.RFC3339)), "403 AuthenticationFailed"},
		{"tampered resource types", tamper("srt", "sc"), "403 AuthenticationFailed"},
		{"tampered services", tamper("ss", "bt"), "403 AuthenticationFailed"},
		{"tampered protocol", tamper("spr", "https"), "403 AuthenticationFailed"},
		{"tampered version", tamper("sv", "2020-12-06"), "403 AuthenticationFailed"},
		{"expired", accountSAS(t, cred, "sco", "rl", func(v *aztables.AccountSASSignatureValues) {
			v.StartTime, v.ExpiryTime = now.Add(-2*time.Hour), now.Add(-time.Minute)
		}), "403 AuthenticationFailed"},
		{"not yet valid", accountSAS(t, cred, "sco", "rl", func(v *aztables.AccountSASSignatureValues) { v.StartTime = now.Add(5 * time.Minute) }), "403 AuthenticationFailed"},
		{"no start", accountSAS(t, cred, "sco", "rl", func(v *aztables.AccountSASSignatureValues) { v.StartTime = time.Time{} }), "0 "},
		{"other service", accountSAS(t, cred, "sco", "rl", func(v *aztables.AccountSASSignatureValues) { v.Services = "bq" }), "403 AuthorizationServiceMismatch"},
		{"IP range holding the client", accountSAS(t, cred, "sco", "rl", func(v *aztables.AccountSASSignatureValues) {
			v.IPRange = aztables.IPRange{Start: net.ParseIP("127.0.0.0"), End: net.ParseIP("127.0.0.9")}
		}), "0 "},
		{"other IP", accountSAS(t, cred, "sco", "rl", func(v *aztables.AccountSASSignatureValues) {
			v.IPRange = aztables.IPRange{Start: net.ParseIP("10.1.2.3")}
		}), "403 AuthorizationSourceIPMismatch"},
		{"version before account SAS", accountSAS(t, cred, "sco", "rl", func(v *aztables.AccountSASSignatureValues) { v.Version = "2015-02-21" }), "403 AuthenticationFailed"},
		{"version with encryption scope", accountSAS(t, cred, "sco", "rl", func(v *aztables.AccountSASSignatureValues) { v.Version = "2020-12-06" }), "403 AuthenticationFailed"},
		{"table SAS with a stored access policy", tamper("si", "policy1"), "403 AuthenticationFailed"},
		{"table SAS on the service", tableURL[strings.Index(tableURL, "?")+1:], "403 AuthorizationFailure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sasService(t, n.URL, tc.token, nil).NewListTablesPager(nil).NextPage(ctx)
			if got := sasOutcome(err); got != tc.want {
				t.Fatalf("got %s (%v), want %s", got, err, tc.want)
			}
		})
	}
	// The SDK signs sv 2020-12-06 and later the old way (no encryption
	// scope line), so the service refuses them; signed the way the service
	// wants they pass.
	for _, ses := range []string{"", "scope1"} {
		q, _ := url.ParseQuery(good)
		q.Set("sv", "2020-12-06")
		if ses != "" {
			q.Set("ses", ses)
		}
		sts := strings.Join([]string{aztest.Account, q.Get("sp"), q.Get("ss"), q.Get("srt"), q.Get("st"), q.Get("se"), q.Get("sip"), q.Get("spr"), q.Get("sv"), ses, ""}, "\n")
		q.Set("sig", signWithKey(t, sts))
		_, err := sasService(t, n.URL, q.Encode(), nil).NewListTablesPager(nil).NextPage(ctx)
		wantStatus(t, "sv 2020-12-06 with ses "+ses, err, 0, "")
	}
}

// signWithKey is the base64 HMAC-SHA256 of s with the development key.
func signWithKey(t testing.TB, s string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(aztest.Key)
	if err != nil {
		t.Fatal(err)
	}
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// TestSASErrorBody checks a refusal's body and headers: the service's
// odata.error document, in the JSON the client negotiated.
func TestSASErrorBody(t *testing.T) {
	n := overEmbedded(t)
	ctx := ctxT(t)
	svc, cred := keyService(t, n.URL, nil)
	table := freshTable(t, ctx, svc, "sasbody")
	for _, tc := range []struct {
		token, path, code, msg string
	}{
		{accountSAS(t, cred, "sco", "l", nil), "/" + table + "(PartitionKey='p',RowKey='r')", "AuthorizationPermissionMismatch", "This request is not authorized to perform this operation using this permission."},
		{accountSAS(t, cred, "sc", "r", nil), "/" + table + "(PartitionKey='p',RowKey='r')", "AuthorizationResourceTypeMismatch", "This request is not authorized to perform this operation using this resource type."},
		{strings.Replace(accountSAS(t, cred, "sco", "r", nil), "sig=", "sig=A", 1), "/Tables", "AuthenticationFailed", "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature."},
	} {
		req, _ := http.NewRequest("GET", n.URL+tc.path+"?"+tc.token, nil)
		req.Header.Set("Accept", "application/json;odata=nometadata")
		resp, body := do(t, req)
		if resp.StatusCode != 403 || resp.Header.Get("x-ms-error-code") != tc.code ||
			!strings.HasPrefix(body, `{"odata.error":{"code":"`+tc.code+`","message":{"lang":"en-US","value":"`+tc.msg+`\nRequestId:`) ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %v %s", tc.code, resp.StatusCode, resp.Header, body)
		}
	}
}

// TestSASTablePermissions runs every entity operation with table SAS
// tokens of each permission set.
func TestSASTablePermissions(t *testing.T) {
	n := overEmbedded(t)
	ctx := ctxT(t)
	svc, _ := keyService(t, n.URL, nil)
	need := map[string]string{"get entity": "r", "query entities": "r", "insert entity": "a", "update entity": "u", "merge entity": "u",
		"insert or replace entity": "au", "insert or merge entity": "au", "delete entity": "d", "transaction": "adu"}
	for _, op := range sasOps {
		t.Run(op.name, func(t *testing.T) {
			for _, sp := range []string{"r", "a", "u", "d", "au", "adu", "raud"} {
				table := freshTable(t, ctx, svc, "sastbl")
				var p aztables.SASPermissions
				if err := p.Parse(sp); err != nil {
					t.Fatal(err)
				}
				sasURL := tableSAS(t, svc, table, p)
				// The same token, held by a service client: what a
				// client of several tables would do with it.
				c := sasService(t, n.URL, sasURL[strings.Index(sasURL, "?")+1:], nil)
				want := "0 "
				switch {
				case op.srt != "o":
					want = "403 AuthorizationFailure" // never granted by a table SAS
				case !containsAll(sp, need[op.name]):
					want = permissionRefusal(op, sp)
				}
				if got := sasOutcome(op.run(ctx, c, table)); got != want {
					t.Errorf("sp=%s: got %s, want %s", sp, got, want)
				}
			}
		})
	}
}

// TestSASTableScope checks that a table SAS works on its table only
// (whatever the case of its name), and not outside its validity period.
func TestSASTableScope(t *testing.T) {
	n := overEmbedded(t)
	ctx := ctxT(t)
	svc, _ := keyService(t, n.URL, nil)
	table := freshTable(t, ctx, svc, "SasScope")
	other := freshTable(t, ctx, svc, "sasother")
	all := aztables.SASPermissions{Read: true, Add: true, Update: true, Delete: true}
	sasURL := tableSAS(t, svc, table, all)
	if !strings.Contains(sasURL, "tn="+strings.ToLower(table)) {
		t.Fatalf("the SDK no longer lowercases tn: %s", sasURL)
	}
	c := sasTableClient(t, sasURL)
	if _, err := c.GetEntity(ctx, "p", "r", nil); err != nil {
		t.Fatalf("own table: %v", err)
	}
	token := sasURL[strings.Index(sasURL, "?")+1:]
	_, err := sasService(t, n.URL, token, nil).NewClient(other).GetEntity(ctx, "p", "r", nil)
	wantStatus(t, "other table", err, 403, "AuthorizationFailure")
	_, err = sasService(t, n.URL, token, nil).NewClient(strings.ToUpper(table)).GetEntity(ctx, "p", "r", nil)
	wantStatus(t, "own table, other case", err, 0, "")

	// Changing any signed field breaks the signature.
	for _, kv := range [][2]string{{"tn", strings.ToLower(other)}, {"sp", "raud"}, {"se", time.Now().Add(72 * time.Hour).UTC().Format(time.RFC3339)}, {"spk", "a"}, {"erk", "z"}, {"sip", "127.0.0.1"}, {"spr", "https,http"}} {
		q, _ := url.ParseQuery(token)
		if kv[0] == "sp" {
			q.Set("sp", "rau")
		} else {
			q.Set(kv[0], kv[1])
		}
		target := table
		if kv[0] == "tn" {
			target = other
		}
		_, err := sasService(t, n.URL, q.Encode(), nil).NewClient(target).GetEntity(ctx, "p", "r", nil)
		wantStatus(t, "tampered "+kv[0], err, 403, "AuthenticationFailed")
	}

	// The SDK's own URL for a ranged SAS lacks the range it signed.
	now := time.Now()
	ranged, err := svc.NewClient(table).GetTableSASURL(aztables.SASPermissions{Read: true, StartPartitionKey: "a", EndPartitionKey: "z"}, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, err = sasTableClient(t, ranged).GetEntity(ctx, "p", "r", nil)
	wantStatus(t, "the SDK's ranged URL", err, 403, "AuthenticationFailed")

	for _, tc := range []struct {
		name          string
		start, expiry time.Time
	}{
		{"expired", now.Add(-2 * time.Hour), now.Add(-time.Second)},
		{"not yet valid", now.Add(time.Minute), now.Add(time.Hour)},
	} {
		u, err := svc.NewClient(table).GetTableSASURL(all, tc.start, tc.expiry)
		if err != nil {
			t.Fatal(err)
		}
		_, err = sasTableClient(t, u).GetEntity(ctx, "p", "r", nil)
		wantStatus(t, tc.name, err, 403, "AuthenticationFailed")
	}
}

// sasRange is a table SAS key range; an empty field is absent.
type sasRange struct{ spk, srk, epk, erk string }

// admits is the service's documented rule for the range ("Specifying
// table access ranges"), written independently of nemo's key encoding.
func (r sasRange) admits(pk, rk string) bool {
	switch {
	case r.spk != "" && r.srk != "":
		if pk < r.spk || (pk == r.spk && rk < r.srk) {
			return false
		}
	case r.spk != "":
		if pk < r.spk {
			return false
		}
	}
	switch {
	case r.epk != "" && r.erk != "":
		if pk > r.epk || (pk == r.epk && rk > r.erk) {
			return false
		}
	case r.epk != "":
		if pk > r.epk {
			return false
		}
	}
	return true
}

// TestSASTableRanges checks a table SAS's key range on every entity
// operation: reads and queries see only the range (a point read outside
// it is not found, as in the service), writes outside it are refused.
func TestSASTableRanges(t *testing.T) {
	n := overEmbedded(t)
	ctx := ctxT(t)
	svc, _ := keyService(t, n.URL, nil)
	keys := [][2]string{{"a", "x"}, {"m", ""}, {"m", "a"}, {"m", "f"}, {"m", "g"}, {"m\x7e", "a"}, {"n", "z"}, {"s", "a"}, {"s", "t"}, {"s", "ta"}, {"s", "u"}, {"sa", ""}, {"z", "a"}}
	for _, r := range []sasRange{
		{"m", "f", "s", "t"},
		{"m", "", "", ""},
		{"m", "f", "", ""},
		{"", "", "s", ""},
		{"", "", "s", "t"},
		{"m", "", "s", ""},
		{"m", "", "m", ""},
		{"m", "f", "m", "f"},
	} {
		t.Run(fmt.Sprintf("%q", []string{r.spk, r.srk, r.epk, r.erk}), func(t *testing.T) {
			table := aztest.TableName("sasrange")
			if _, err := svc.CreateTable(ctx, table, nil); err != nil {
				t.Fatal(err)
			}
			kc := svc.NewClient(table)
			for _, k := range keys {
				if _, err := kc.AddEntity(ctx, []byte(fmt.Sprintf(`{"PartitionKey":%q,"RowKey":%q}`, k[0], k[1])), nil); err != nil {
					t.Fatal(err)
				}
			}
			c := sasTableClient(t, tableSAS(t, svc, table, aztables.SASPermissions{Read: true, Add: true, Update: true, Delete: true,
				StartPartitionKey: r.spk, StartRowKey: r.srk, EndPartitionKey: r.epk, EndRowKey: r.erk}))

			var want []string
			for _, k := range keys {
				if r.admits(k[0], k[1]) {
					want = append(want, k[0]+"/"+k[1])
				}
			}
			for _, top := range []int32{1000, 2} {
				if got := listKeys(t, ctx, c, nil, top); strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("query (top %d): got %q, want %q", top, got, want)
				}
			}
			f := "PartitionKey ge 'n'"
			var wantN []string
			for _, k := range want {
				if k >= "n" {
					wantN = append(wantN, k)
				}
			}
			if got := listKeys(t, ctx, c, &f, 1000); strings.Join(got, ",") != strings.Join(wantN, ",") {
				t.Errorf("filtered query: got %q, want %q", got, wantN)
			}

			for _, k := range keys {
				in := r.admits(k[0], k[1])
				ent := []byte(fmt.Sprintf(`{"PartitionKey":%q,"RowKey":%q,"V":2}`, k[0], k[1]))
				newEnt := []byte(fmt.Sprintf(`{"PartitionKey":%q,"RowKey":%q}`, k[0], k[1]+"~"))
				refused, notFound := "403 AuthorizationFailure", "404 ResourceNotFound"
				ok := func(s string) string {
					if in {
						return "0 "
					}
					return s
				}
				_, err := c.GetEntity(ctx, k[0], k[1], nil)
				check(t, k, "get", err, ok(notFound))
				_, err = c.UpdateEntity(ctx, ent, nil)
				check(t, k, "merge", err, ok(refused))
				_, err = c.UpsertEntity(ctx, ent, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
				check(t, k, "upsert", err, ok(refused))
				insertWant := refused
				if r.admits(k[0], k[1]+"~") {
					insertWant = "0 "
				}
				_, err = c.AddEntity(ctx, newEnt, nil)
				check(t, k, "insert", err, insertWant)
				// A transaction on the partition: the entity's update comes
				// second, after an insert that is in range when the entity is.
				_, err = c.SubmitTransaction(ctx, []aztables.TransactionAction{
					{ActionType: aztables.TransactionTypeInsertReplace, Entity: []byte(fmt.Sprintf(`{"PartitionKey":%q,"RowKey":%q}`, k[0], k[1]+"~~"))},
					{ActionType: aztables.TransactionTypeUpdateMerge, Entity: ent},
				}, nil)
				batchWant := "0 "
				switch {
				case !r.admits(k[0], k[1]+"~~"):
					batchWant = "202 AuthorizationFailure@0"
				case !in:
					batchWant = "202 AuthorizationFailure@1"
				}
				check(t, k, "transaction", err, batchWant)
				_, err = c.DeleteEntity(ctx, k[0], k[1], nil)
				check(t, k, "delete", err, ok(refused))
			}
		})
	}
}

func check(t *testing.T, key [2]string, what string, err error, want string) {
	t.Helper()
	if got := sasOutcome(err); got != want {
		t.Errorf("%s %q: got %s (%v), want %s", what, key, got, err, want)
	}
}

// listKeys pages through a query and returns "pk/rk" of every entity.
func listKeys(t *testing.T, ctx context.Context, c *aztables.Client, filter *string, top int32) []string {
	t.Helper()
	var out []string
	p := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: filter, Top: &top, Select: nil})
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entities {
			m := decodeMap(t, e)
			out = append(out, m["PartitionKey"].(string)+"/"+m["RowKey"].(string))
		}
	}
	return out
}
