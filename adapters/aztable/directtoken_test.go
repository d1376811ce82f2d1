package aztable

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// staticToken is a token credential handing out one token.
type staticToken struct{}

func (staticToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: "tok", ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// TestDirectWithToken: a Store authenticated with a token credential
// sends the partition "" writes and reads directly, with the bearer token
// the SDK would send (Azurite takes tokens only over HTTPS with its OAuth
// mode, so an HTTPS test server stands in for the service and records
// what arrives); other partitions' reads stay on the SDK's path.
func TestDirectWithToken(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sdk := strings.HasPrefix(r.Header.Get("User-Agent"), "azsdk-go-aztables/")
		got = append(got, fmt.Sprint(r.Method, " ", r.URL.EscapedPath(), " ", r.Header.Get("Authorization"), " ", r.Header.Get("x-ms-version"), " sdk=", sdk))
		mu.Unlock()
		w.Header().Set("ETag", `W/"datetime'2026-12-04T00%3A00%3A00.0000000Z'"`)
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"PartitionKey":"","RowKey":"r","N":1}`))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	s, err := New(Options{ServiceURL: srv.URL + "/acct", Credential: staticToken{}, MaxRetries: -1, Transport: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	vers, err := s.Upsert(ctx, "t", adapters.Puts([]adapters.Record{val("", "r", 1)}))
	if err != nil || vers[0] == "" {
		t.Fatalf("upsert: %q %v", vers, err)
	}
	if err := s.Delete(ctx, "t", []adapters.Write{{Key: tablecodec.EncodeKey("", "r")}}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	for _, pk := range []string{"", "p"} {
		recs, err := s.Get(ctx, "t", [][]byte{tablecodec.EncodeKey(pk, "r")})
		if err != nil || recs[0].Value == nil {
			t.Fatalf("get: %v", err)
		}
	}
	entity := "/acct/t(PartitionKey='',RowKey='r')"
	want := []string{
		"PUT " + entity + " Bearer tok 2019-02-02 sdk=false",
		"DELETE " + entity + " Bearer tok 2019-02-02 sdk=false",
		"GET " + entity + " Bearer tok 2019-02-02 sdk=false",
		"GET /acct/t(PartitionKey='p',RowKey='r') Bearer tok 2019-02-02 sdk=true",
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("requests %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: %q, want %q", i, got[i], want[i])
		}
	}
}
