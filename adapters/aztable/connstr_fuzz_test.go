package aztable

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
)

// addressTransport records the address of each request (its URL without
// the query) and sends none.
type addressTransport struct {
	mu    sync.Mutex
	addrs []string
}

var errNotSent = errors.New("not sent (test)")

func (a *addressTransport) Do(req *http.Request) (*http.Response, error) {
	u := *req.URL
	u.RawQuery, u.ForceQuery = "", false
	a.mu.Lock()
	a.addrs = append(a.addrs, u.String())
	a.mu.Unlock()
	return nil, errNotSent
}

// FuzzConnectionString: whatever connection string a Store accepts, its
// own requests go where the SDK's go. nemo reads the string itself
// (parseConnectionString) for its direct client, aztables for the SDK's
// client (but for a shared access signature, where nemo builds the SDK's
// service URL from its own reading too, sasServiceClient): the same
// entity's point read must then have the same scheme, host and path both
// ways, or an entity read directly would not be the one the SDK writes.
func FuzzConnectionString(f *testing.F) {
	for _, s := range []string{
		"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;",
		"AccountName=a;AccountKey=a2V5;EndpointSuffix=core.chinacloudapi.cn",
		"DefaultEndpointsProtocol=http;AccountName=a;AccountKey=a2V5",
		"AccountName=a;AccountKey=a2V5;TableEndpoint=",
		"AccountName=a;AccountKey=a2V5;TableEndpoint=https://h:1/p/;",
		"TableEndpoint=https://a.table.core.windows.net/;SharedAccessSignature=?sv=1&sig=x%2B",
		"AccountName=a;SharedAccessSignature=sv=1&sig=x",
		"AccountName=a;AccountKey=;SharedAccessSignature=sig=x;TableEndpoint=http://h/a",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rt := &addressTransport{}
		st, err := New(Options{ConnectionString: s, Transport: rt, MaxRetries: -1})
		if err != nil || st.direct == nil {
			return
		}
		ctx := context.Background()
		_, sdkErr := st.table("t").GetEntity(ctx, "p", "r", nil)
		_, _, directErr := st.direct.get(ctx, "t", "p", "r")
		if len(rt.addrs) == 2 && rt.addrs[0] == rt.addrs[1] {
			return
		}
		t.Fatalf("%q: the SDK and the direct client address an entity differently: %q (SDK: %v; direct: %v)", s, rt.addrs, sdkErr, directErr)
	})
}
