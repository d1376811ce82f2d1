package aztable

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/deadline"
)

// recordingTransport keeps every request it sends on.
type recordingTransport struct {
	mu     sync.Mutex
	reqs   []*http.Request
	bodies [][]byte // reqs[i]'s body
}

func (r *recordingTransport) Do(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	r.mu.Lock()
	r.reqs, r.bodies = append(r.reqs, req), append(r.bodies, body)
	r.mu.Unlock()
	return http.DefaultClient.Do(req)
}

func (r *recordingTransport) last() *http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs[len(r.reqs)-1]
}

// TestDirectReadMatchesSDK: the direct point read sends the request the
// SDK's GetEntity sends (same escaped path, the headers the service reads)
// and Azurite accepts its signature, for keys that need escaping (quotes,
// spaces, '%', '+', non-ASCII); both ways return the same record. An
// empty PartitionKey, which the SDK refuses to send, reads directly.
func TestDirectReadMatchesSDK(t *testing.T) {
	url := aztest.Azurite(t)
	rt := &recordingTransport{}
	s, err := New(Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), MaxRetries: -1, Transport: rt})
	if err != nil {
		t.Fatal(err)
	}
	viaSDK, err := New(Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), MaxRetries: -1, Transport: rt})
	if err != nil {
		t.Fatal(err)
	}
	viaSDK.direct = nil
	ks := newTable(t, s, "direct")
	ctx := context.Background()
	keys := [][2]string{{"p", "r"}, {"o'brien", "it''s"}, {"a b", "c+d=e&f;g"}, {"100%", "%41%2F"}, {"ü€", "😀 x"}, {"p", ""}}
	for _, k := range keys {
		rec := val(k[0], k[1], 7)
		put(t, s, ks, rec)
		got := getOne(t, s, ks, rec.Key)
		direct := rt.last()
		want := getOne(t, viaSDK, ks, rec.Key)
		sdk := rt.last()
		if got.Value == nil || !bytes.Equal(got.Value, want.Value) || got.Version != want.Version {
			t.Errorf("%q: direct read %q %x, SDK %q %x", k, got.Version, got.Value, want.Version, want.Value)
		}
		if direct.URL.EscapedPath() != sdk.URL.EscapedPath() {
			t.Errorf("%q: direct path %s, SDK %s", k, direct.URL.EscapedPath(), sdk.URL.EscapedPath())
		}
		for _, h := range []string{"X-Ms-Version", "Accept", "Dataserviceversion"} {
			if a, b := header(direct, h), header(sdk, h); a != b || a == "" {
				t.Errorf("%q: %s %q, SDK %q", k, h, a, b)
			}
		}
		if a, b := direct.Header.Get("Authorization"), sdk.Header.Get("Authorization"); !strings.HasPrefix(a, "SharedKeyLite "+aztest.Account+":") ||
			!strings.HasPrefix(b, "SharedKeyLite "+aztest.Account+":") {
			t.Errorf("%q: Authorization %q, SDK %q", k, a, b)
		}
	}
	// Absent: an absent entity and an absent table read as absent.
	for _, table := range []adapters.Keyspace{ks, "nosuchtable" + ks} {
		if got := getOne(t, s, table, tablecodec.EncodeKey("p", "absent")); got.Value != nil {
			t.Errorf("absent entity of %s read as %x", table, got.Value)
		}
	}
	// An empty PartitionKey: the service stores it (an insert names the
	// keys in its body); the SDK refuses to ask for it.
	if _, err := s.table(ks).AddEntity(ctx, []byte(`{"PartitionKey":"","RowKey":"r","N":9}`), nil); err != nil {
		t.Fatal(err)
	}
	rec := val("", "r", 9)
	if got := getOne(t, s, ks, rec.Key); got.Value == nil || nOf(t, got.Value) != 9 {
		t.Errorf("empty PartitionKey: direct read %x", got.Value)
	}
	if _, err := viaSDK.Get(ctx, ks, [][]byte{rec.Key}); err == nil {
		t.Error("the SDK read an empty PartitionKey: the direct read's reason to exist there is gone; update direct.go's and directwrite.go's comments")
	}
}

// header is req's header name, however the sender spelled it (the SDK
// sets "x-ms-version" and "DataServiceVersion" as written).
func header(req *http.Request, name string) string {
	for k, v := range req.Header {
		if strings.EqualFold(k, name) && len(v) == 1 {
			return v[0]
		}
	}
	return ""
}

// flaky answers the first fail requests with status (and the service's
// error document, ServerBusy or InternalError, plus header hdr), then 404
// ResourceNotFound (forever when fail < 0).
func flaky(fail, status int, hdr http.Header) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := "ResourceNotFound"
		if i := n.Add(1); fail < 0 || int(i) <= fail {
			code = map[int]string{http.StatusServiceUnavailable: "ServerBusy", http.StatusTooManyRequests: "ServerBusy"}[status]
			if code == "" {
				code = "InternalError"
			}
			for k, v := range hdr {
				w.Header()[k] = v
			}
		} else {
			status = http.StatusNotFound
		}
		w.Header().Set("x-ms-error-code", code)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"odata.error":{"code":%q,"message":{"lang":"en-US","value":"x"}}}`, code)
	}))
	return srv, &n
}

// TestDirectReadRetries: the direct read retries and gives up exactly as
// the SDK's pipeline does, and fails with the same kind of error: the same
// number of requests for transient statuses, persistent throttling (a
// *ThrottleError), a persistent 500 (ErrUnavailable), a Retry-After the
// cap allows (waited) and one it does not (no retry), and a call whose
// context asks for a single attempt (adapters.WithSingleAttempt).
func TestDirectReadRetries(t *testing.T) {
	key := tablecodec.EncodeKey("p", "r")
	cases := []struct {
		name       string
		fail       int
		status     int
		hdr        http.Header
		wantReqs   int32
		wantErr    error // nil: read as absent
		throttle   bool
		atLeast    time.Duration
		maxRetries int
		single     bool // the call's context asks for one attempt
	}{
		{name: "two 503s", fail: 2, status: 503, wantReqs: 3},
		{name: "a 500", fail: 1, status: 500, wantReqs: 2},
		{name: "persistent 503", fail: -1, status: 503, wantReqs: 3, wantErr: adapters.ErrUnavailable, throttle: true},
		{name: "persistent 429", fail: -1, status: 429, wantReqs: 3, wantErr: adapters.ErrUnavailable, throttle: true},
		{name: "persistent 502", fail: -1, status: 502, wantReqs: 3, wantErr: adapters.ErrUnavailable},
		{name: "Retry-After-Ms within the cap", fail: 1, status: 503, hdr: http.Header{"Retry-After-Ms": {"40"}}, wantReqs: 2, atLeast: 40 * time.Millisecond},
		{name: "Retry-After beyond the cap", fail: 1, status: 503, hdr: http.Header{"Retry-After": {"3"}}, wantReqs: 1, wantErr: adapters.ErrUnavailable, throttle: true},
		{name: "no retries", fail: 1, status: 503, wantReqs: 1, wantErr: adapters.ErrUnavailable, throttle: true, maxRetries: -1},
		{name: "a single attempt asked", fail: 1, status: 503, wantReqs: 1, wantErr: adapters.ErrUnavailable, throttle: true, single: true},
		{name: "a single attempt asked, 500", fail: 1, status: 500, wantReqs: 1, wantErr: adapters.ErrUnavailable, single: true},
	}
	for _, tc := range cases {
		for _, viaSDK := range []bool{false, true} {
			srv, n := flaky(tc.fail, tc.status, tc.hdr)
			s, err := New(Options{ServiceURL: srv.URL + "/acct", Account: "acct", Key: aztest.Key, MaxRetries: cmp.Or(tc.maxRetries, 2),
				RetryDelay: time.Millisecond, MaxRetryDelay: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if viaSDK {
				s.direct = nil
			}
			ctx := context.Background()
			if tc.single {
				ctx = adapters.WithSingleAttempt(ctx)
			}
			start := time.Now()
			recs, err := s.Get(ctx, "t", [][]byte{key})
			took := time.Since(start)
			srv.Close()
			where := fmt.Sprintf("%s (SDK %v)", tc.name, viaSDK)
			if got := n.Load(); got != tc.wantReqs {
				t.Errorf("%s: %d requests, want %d", where, got, tc.wantReqs)
			}
			if tc.wantErr == nil {
				if err != nil || recs[0].Value != nil {
					t.Errorf("%s: %v %x, want an absent record", where, err, recs)
				}
			} else if !errors.Is(err, tc.wantErr) {
				t.Errorf("%s: %v, want %v", where, err, tc.wantErr)
			}
			var te *ThrottleError
			if errors.As(err, &te) != tc.throttle {
				t.Errorf("%s: %v: ThrottleError %v, want %v", where, err, !tc.throttle, tc.throttle)
			}
			if took < tc.atLeast {
				t.Errorf("%s: answered after %v, before the %v the service asked for", where, took, tc.atLeast)
			}
		}
	}
}

// TestDirectReadCancelled: a read whose context ends while it waits to
// retry returns the context's error, not the service's.
func TestDirectReadCancelled(t *testing.T) {
	srv, _ := flaky(-1, 503, nil)
	defer srv.Close()
	s, err := New(Options{ServiceURL: srv.URL + "/acct", Account: "acct", Key: aztest.Key, MaxRetries: 5, RetryDelay: time.Second, MaxRetryDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.Get(ctx, "t", [][]byte{tablecodec.EncodeKey("p", "r")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled read: %v, want context.DeadlineExceeded", err)
	}
}

// TestDirectWriteStartsNoRetryPastTheRequestDeadline: a commit whose
// context outlives its request's deadline (internal/deadline.Write) is
// sent, but once that deadline has passed it starts no new attempt: a
// throttled write fails with the service's refusal (ErrUnavailable: not
// applied) rather than retrying on to the client's deadline. Without the
// extension the same write retries.
func TestDirectWriteStartsNoRetryPastTheRequestDeadline(t *testing.T) {
	for _, extended := range []bool{true, false} {
		srv, n := flaky(2, 503, nil)
		s, err := New(Options{ServiceURL: srv.URL + "/acct", Account: "acct", Key: aztest.Key, MaxRetries: 5,
			RetryDelay: 200 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		long, cancelLong := context.WithTimeout(context.Background(), 10*time.Second)
		ctx, _, cancel := deadline.Start(long, 100*time.Millisecond, 0)
		sent := context.CancelFunc(func() {})
		if extended {
			ctx, sent = deadline.Write(ctx)
		} else {
			ctx = long
		}
		rec := val("p", "r", 1)
		_, err = s.Upsert(ctx, "t", []adapters.Write{{Key: rec.Key, Value: rec.Value}})
		sent()
		cancel()
		cancelLong()
		srv.Close()
		switch got := n.Load(); {
		case extended && (got != 1 || !errors.Is(err, adapters.ErrUnavailable)):
			t.Errorf("extended past its request deadline: %d requests, %v; want 1 request and ErrUnavailable", got, err)
		case !extended && got != 3:
			t.Errorf("not extended: %d requests (%v), want 3 (two 503s retried)", got, err)
		}
	}
}

// TestNoteAttempt: an attempt marks a write's note when it may have been
// applied without an answer (no response, or a response whose body the
// SDK failed to download: it returns both), or was answered 500, 502 or
// 504; a refusal or success with its answer leaves the note alone, and so
// does a connection that could not be made (nothing was sent).
func TestNoteAttempt(t *testing.T) {
	lost := errors.New("connection reset")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	_, refused := http.Post("http://"+closed+"/", "text/plain", nil) // as the client reports a refused dial
	if refused == nil {
		t.Fatal("a post to a closed port succeeded")
	}
	cases := []struct {
		name   string
		status int // 0: no response
		lost   error
		unsure bool
	}{
		{"transport error", 0, lost, true},
		{"connection refused", 0, refused, false},
		{"name not resolved", 0, &url.Error{Op: "Post", URL: "http://nosuch", Err: &net.DNSError{Err: "no such host", Name: "nosuch"}}, false},
		{"200, body lost in download", 200, lost, true},
		{"500", 500, nil, true},
		{"502", 502, nil, true},
		{"504", 504, nil, true},
		{"503 ServerBusy (not applied)", 503, nil, false},
		{"412 refusal", 412, nil, false},
		{"204", 204, nil, false},
	}
	for _, tc := range cases {
		ctx, n := sentWrite(context.Background())
		var resp *http.Response
		if tc.status != 0 {
			resp = &http.Response{StatusCode: tc.status}
		}
		noteAttempt(ctx, resp, tc.lost)
		if n.unsure.Load() != tc.unsure {
			t.Errorf("%s: unsure %v, want %v", tc.name, n.unsure.Load(), tc.unsure)
		}
	}
	noteAttempt(context.Background(), nil, lost) // no note: nothing to mark, no panic
}

// TestCloseClosesIdleConnections: Close closes every connection the Store
// keeps to the service, the one its point reads went out on (the lean
// transport where it runs) and the one the SDK's query went out on, and the
// Store still works after it.
func TestCloseClosesIdleConnections(t *testing.T) {
	var opened, closed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json;odata=minimalmetadata")
		if strings.Contains(r.URL.Path, "(PartitionKey=") {
			w.Header().Set("x-ms-error-code", "ResourceNotFound")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"odata.error":{"code":"ResourceNotFound","message":{"lang":"en-US","value":"x"}}}`)
			return
		}
		io.WriteString(w, `{"value":[]}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	s, err := New(Options{ServiceURL: srv.URL + "/acct", Account: "acct", Key: aztest.Key, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	use := func() {
		t.Helper()
		ctx := context.Background()
		if recs, err := s.Get(ctx, "t", [][]byte{tablecodec.EncodeKey("p", "r")}); err != nil || recs[0].Value != nil {
			t.Fatalf("point read: %v %v, want an absent record", recs, err)
		}
		if recs, _, err := s.GetRange(ctx, "t", nil, nil, 10); err != nil || len(recs) != 0 {
			t.Fatalf("query: %v %v, want no records", recs, err)
		}
	}
	allClosed := func(when string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); closed.Load() < opened.Load(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d connections closed", when, closed.Load(), opened.Load())
			}
		}
	}
	for round := range 2 {
		use()
		if opened.Load() == closed.Load() {
			t.Fatalf("round %d: no connection kept after the calls (%d opened)", round, opened.Load())
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		allClosed(fmt.Sprintf("round %d, after Close", round))
	}
	if want := int64(2); runtime.GOOS == "linux" && opened.Load() != 2*want {
		t.Errorf("%d connections over two rounds, want %d a round (the lean transport's and the SDK's)", opened.Load(), want)
	}
}
