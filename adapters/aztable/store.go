package aztable

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// Service limits of an entity group transaction.
const (
	MaxBatchOps   = 100
	MaxBatchBytes = 4 << 20
	// batchOpOverhead is what one operation adds to a $batch body beyond
	// its entity JSON: the part headers and the request line (about 400
	// bytes with a long table name and key); budgeted generously.
	batchOpOverhead = 1 << 10
	maxPageSize     = 1000
)

// Options configure New. Exactly one way to authenticate is used, in this
// order: ConnectionString; Account + Key (ServiceURL defaults to the public
// endpoint of Account); Credential; else DefaultAzureCredential with
// ServiceURL (or the public endpoint of Account).
type Options struct {
	// ConnectionString is an Azure Storage connection string, e.g.
	// "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=...;TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;",
	// or one holding a shared access signature instead of the key, e.g.
	// "TableEndpoint=https://acct.table.core.windows.net/;SharedAccessSignature=sv=...&sig=...".
	ConnectionString string
	// ServiceURL is the table endpoint ("https://acct.table.core.windows.net",
	// or path-style "http://127.0.0.1:10002/devstoreaccount1").
	ServiceURL string
	// Account and Key (base64) authenticate with Shared Key.
	Account, Key string
	// Credential authenticates with Microsoft Entra ID tokens.
	Credential azcore.TokenCredential
	// MaxRetries is how often a throttled (429, 503) or failed (408, 500,
	// 502, 504, transport error) request is retried. Default 5; negative
	// means none.
	MaxRetries int
	// RetryDelay is the first backoff (doubling, jittered, up to
	// MaxRetryDelay, or the service's Retry-After). Defaults 200ms and 10s.
	RetryDelay, MaxRetryDelay time.Duration
	// TryTimeout bounds one attempt. Default 30s.
	TryTimeout time.Duration
	// Parallelism bounds concurrent point reads of one call. Default 8.
	Parallelism int
	// WriteParallelism bounds the concurrent requests of one write call:
	// an entity group transaction per partition. A write-back call spans
	// up to WriteBatch records in as many partitions, each a request a
	// round trip away; in nemo-bench's write-back soak at a 10 ms round
	// trip, 8 at once capped write-back at about 180 records a second
	// and 32 reached about 610. Default 32.
	WriteParallelism int
	// ETagMemory bounds how many written entities the Store remembers
	// nemo's stamps of, so that an entity nemo wrote reads back with the
	// Timestamp and ETag nemo gave the client until it really changes (see
	// stampMemo: about 110 bytes plus the key per entry). Default
	// DefaultETagMemory; negative remembers nothing.
	ETagMemory int
	// Transport replaces the HTTP client (tests).
	Transport policy.Transporter
	Logger    *slog.Logger
}

// maxIdlePerHost is how many idle connections to the service the Store
// keeps. azcore's default HTTP client keeps 10, so more concurrent calls
// than that (16 clients missing at once) opened a connection for the
// excess and closed it after one request: 700-850 sockets in TIME_WAIT
// towards Azurite during a benchmark, and a connect and accept per call
// on both sides (a TLS handshake too in front of Azure).
const maxIdlePerHost = 256

// pooledClient is Go's default HTTP transport keeping maxIdlePerHost idle
// connections per host.
func pooledClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = maxIdlePerHost, maxIdlePerHost
	return &http.Client{Transport: t}
}

// Store is an adapters.Store over one Azure Table account. Safe for
// concurrent use.
type Store struct {
	svc *aztables.ServiceClient
	par int // concurrent point reads of a call (Options.Parallelism)
	// writePar: concurrent transactions of a write call (Options.WriteParallelism)
	writePar int
	log      *slog.Logger
	mu       sync.Mutex
	tabs     map[adapters.Keyspace]*aztables.Client
	memo     *stampMemo // nil when Options.ETagMemory < 0
	// direct sends point reads and writes outside the SDK (direct.go,
	// directwrite.go; with a token credential only the partition ""'s).
	direct *directClient
	// closeIdle closes the idle connections of the SDK's transport.
	closeIdle func()
	// endpoint is the table endpoint, auth how requests authenticate
	// (Endpoint, Auth).
	endpoint, auth string
}

var _ adapters.Store = (*Store)(nil)

// New connects a Store. It sends no request.
func New(opts Options) (*Store, error) {
	if opts.MaxRetries == 0 {
		opts.MaxRetries = 5
	}
	if opts.MaxRetries < 0 {
		opts.MaxRetries = -1 // azcore: -1 disables retries, 0 means its default
	}
	if opts.RetryDelay == 0 {
		opts.RetryDelay = 200 * time.Millisecond
	}
	if opts.MaxRetryDelay == 0 {
		opts.MaxRetryDelay = 10 * time.Second
	}
	if opts.TryTimeout == 0 {
		opts.TryTimeout = 30 * time.Second
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = 8
	}
	if opts.WriteParallelism <= 0 {
		opts.WriteParallelism = 32
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	co := &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{
		Retry: policy.RetryOptions{
			MaxRetries:    int32(opts.MaxRetries),
			RetryDelay:    opts.RetryDelay,
			MaxRetryDelay: opts.MaxRetryDelay,
			TryTimeout:    opts.TryTimeout,
			StatusCodes: []int{http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
				http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout},
		},
		PerCallPolicies:  []policy.Policy{attemptPolicy{}, bodyPolicy{}},
		PerRetryPolicies: []policy.Policy{unsurePolicy{}},
		Transport:        opts.Transport,
	}}
	if co.Transport == nil {
		co.Transport = pooledClient()
	}
	endpoint := opts.ServiceURL
	if endpoint == "" && opts.Account != "" {
		endpoint = "https://" + opts.Account + ".table.core.windows.net"
	}
	var svc *aztables.ServiceClient
	var token azcore.TokenCredential
	var cs connString
	var err error
	auth := authAccountKey
	switch {
	case opts.ConnectionString != "":
		// nemo reads the string once, for the SDK's client and its own
		// (directFor), so that both address the same endpoint.
		cs = parseConnectionString(opts.ConnectionString)
		svc, err = connStringClient(cs, co)
		if cs.key == "" {
			auth = authSAS
		}
	case opts.Key != "":
		if opts.Account == "" {
			return nil, fmt.Errorf("aztable: an account key needs the account name: %w", adapters.ErrInvalid)
		}
		var cred *aztables.SharedKeyCredential
		if cred, err = aztables.NewSharedKeyCredential(opts.Account, opts.Key); err == nil {
			svc, err = aztables.NewServiceClientWithSharedKey(endpoint, cred, co)
		}
	default:
		if endpoint == "" {
			return nil, fmt.Errorf("aztable: no connection string, account or service URL: %w", adapters.ErrInvalid)
		}
		token, auth = opts.Credential, authToken
		if token == nil {
			auth = authDefaultCredential
			if token, err = azidentity.NewDefaultAzureCredential(nil); err != nil {
				return nil, fmt.Errorf("aztable: default Azure credential: %w", err)
			}
		}
		svc, err = aztables.NewServiceClient(endpoint, token, co)
	}
	if err == nil {
		err = checkEndpoint(cmp.Or(cs.endpoint, endpoint))
	}
	if err != nil {
		return nil, fmt.Errorf("aztable: %w: %w", adapters.ErrInvalid, err)
	}
	s := &Store{svc: svc, par: opts.Parallelism, writePar: opts.WriteParallelism, log: opts.Logger, tabs: map[adapters.Keyspace]*aztables.Client{},
		memo: newStampMemo(opts.ETagMemory), closeIdle: idleCloser(co.Transport), endpoint: cmp.Or(cs.endpoint, endpoint), auth: auth}
	if s.direct, err = directFor(opts, cs, endpoint, token, co); err != nil {
		return nil, fmt.Errorf("aztable: %w: %w", adapters.ErrInvalid, err)
	}
	return s, nil
}

// Close closes the Store's idle connections to the service (the lean
// transport's and the SDK's). Calls in flight are not interrupted; the
// Store stays usable, a later call opening new connections.
func (s *Store) Close() error {
	if s.direct != nil {
		s.direct.closeIdle()
	}
	s.closeIdle()
	return nil
}

// connStringClient is the SDK's client of the connection string cs: with
// its account key, or its shared access signature (sasServiceClient).
func connStringClient(cs connString, co *aztables.ClientOptions) (*aztables.ServiceClient, error) {
	switch {
	case cs.endpoint == "":
	case cs.key != "":
		cred, err := aztables.NewSharedKeyCredential(cs.account, cs.key)
		if err != nil {
			return nil, err
		}
		return aztables.NewServiceClientWithSharedKey(cs.endpoint, cred, co)
	case cs.sas != "":
		if err := checkSAS(cs.sas); err != nil {
			return nil, err
		}
		sdk := *co
		sdk.Transport = redactSig{co.Transport}
		return sasServiceClient(cs, &sdk)
	}
	return nil, errConnString
}

// directFor is the directClient of a Store: signing with the account key
// (of the connection string cs, parsed by New, or Options.Key), else authenticated with the
// connection string's shared access signature (sasTransport) or with the
// token credential. With a key or a signature every point read and every
// write goes out directly; with a token only the partition ""'s do.
func directFor(opts Options, cs connString, endpoint string, token azcore.TokenCredential, co *aztables.ClientOptions) (*directClient, error) {
	account, key, sas := opts.Account, opts.Key, ""
	if opts.ConnectionString != "" {
		endpoint, account, key, sas = cs.endpoint, cs.account, cs.key, cs.sas
	}
	var d *directClient
	var err error
	switch {
	case key != "":
		d, err = newDirectClient(endpoint, account, key, co.Transport, co.Retry)
	case sas != "":
		send, closeIdle := sendFunc(endpoint, co.Transport)
		d, err = newDirectClient(endpoint, account, "", sasTransport{sas: sas, next: doFunc(send)}, co.Retry)
		if err == nil {
			d.opQuery, d.closeIdle = sas, closeIdle
		}
	case token != nil:
		return newDirectClient(endpoint, "", "", tokenTransport(token, co), co.Retry)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	d.allPartitions = true
	return d, nil
}

// connString is what a Store uses of a connection string.
type connString struct {
	endpoint string // the table endpoint; "" when the string names none
	account  string
	key      string // AccountKey (base64); it wins over sas, as in aztables
	sas      string // SharedAccessSignature, as written, without a leading '?'
}

// checkEndpoint refuses a table endpoint that is not an http or https URL
// with a host and nothing after its path: the SDK would fail every request
// to it, or, with a query or fragment, address them differently from the
// Store's own requests.
func checkEndpoint(e string) error {
	u, err := url.Parse(e)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" || u.User != nil ||
		strings.ContainsAny(e, "?#") {
		return errors.New("the table endpoint is not an http or https URL with a host, no user information, query or fragment")
	}
	return nil
}

// errConnString: a connection string New cannot use.
var errConnString = errors.New("aztable: malformed connection string: want key=value pairs separated by ';' with an AccountName and AccountKey, or a SharedAccessSignature, and a TableEndpoint (or an AccountName to derive it from); a TableEndpoint, if given, not empty")

// parseConnectionString reads a connection string as aztables reads one
// with an AccountKey: the endpoint is TableEndpoint, else derived from
// AccountName, DefaultEndpointsProtocol (https) and EndpointSuffix
// (core.windows.net). A string holding a shared access signature instead
// is read the same way (see sasServiceClient). A malformed string is the
// zero connString, and so is one whose TableEndpoint is empty (aztables
// would address every request to the empty URL).
func parseConnectionString(s string) connString {
	kv := map[string]string{}
	for _, part := range strings.Split(strings.TrimRight(s, ";"), ";") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return connString{}
		}
		kv[k] = v
	}
	if e, ok := kv["TableEndpoint"]; ok && e == "" {
		return connString{}
	}
	cs := connString{endpoint: kv["TableEndpoint"], account: kv["AccountName"], key: kv["AccountKey"], sas: strings.TrimPrefix(kv["SharedAccessSignature"], "?")}
	if cs.endpoint == "" && cs.account != "" {
		protocol, suffix := cmp.Or(kv["DefaultEndpointsProtocol"], "https"), cmp.Or(kv["EndpointSuffix"], "core.windows.net")
		cs.endpoint = protocol + "://" + cs.account + ".table." + suffix
	}
	if cs.endpoint == "" || (cs.key != "" && cs.account == "") {
		return connString{}
	}
	return cs
}

func (s *Store) table(ks adapters.Keyspace) *aztables.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.tabs[ks]
	if c == nil {
		c = s.svc.NewClient(string(ks))
		s.tabs[ks] = c
	}
	return c
}

// ThrottleError reports that the service kept refusing a request with 429
// or 503 through every retry. errors.Is(err, adapters.ErrUnavailable) holds.
type ThrottleError struct {
	Op         string
	StatusCode int
	ErrorCode  string // e.g. "ServerBusy"
	Err        error  // the last *azcore.ResponseError
}

func (e *ThrottleError) Error() string {
	return fmt.Sprintf("aztable: %s throttled (%d %s) through every retry", e.Op, e.StatusCode, e.ErrorCode)
}

// Unwrap returns the service's last response error.
func (e *ThrottleError) Unwrap() error { return e.Err }

// Is makes a ThrottleError an adapters.ErrUnavailable.
func (e *ThrottleError) Is(target error) bool { return target == adapters.ErrUnavailable }

// errorCode returns the service's status and error code, if err is a
// response error.
func errorCode(err error) (int, string) {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode, re.ErrorCode
	}
	return 0, ""
}

func isNotFound(err error) bool {
	st, _ := errorCode(err)
	return st == http.StatusNotFound
}

// serviceError is the service's answer to a failed call (an
// *azcore.ResponseError, wrapped): adapters.ServiceError names its HTTP
// status and error code for the failure log.
type serviceError struct {
	err    error
	status int
	code   string
}

func (e serviceError) Error() string { return e.err.Error() }

func (e serviceError) Unwrap() error { return e.err }

// ServiceStatus implements adapters.ServiceError: the HTTP status, and the
// service's error code as its message.
func (e serviceError) ServiceStatus() (string, string) { return strconv.Itoa(e.status), e.code }

// classify labels a failed call: throttling that outlived the retries is a
// ThrottleError, server and transport failures are ErrUnavailable, a
// refused credential (401, 403) ErrAccessDenied, a missing table
// ErrKeyspaceGone, the rest (a request the service rejected) passes
// through wrapped.
func classify(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("aztable: %s: %w", op, err)
	}
	st, code := errorCode(err)
	if st != 0 {
		err = serviceError{err, st, code}
	}
	switch {
	case st == http.StatusTooManyRequests || st == http.StatusServiceUnavailable:
		return &ThrottleError{Op: op, StatusCode: st, ErrorCode: code, Err: err}
	case st == 0 || st == http.StatusRequestTimeout || st >= 500:
		return fmt.Errorf("aztable: %s: %w: %w", op, adapters.ErrUnavailable, err)
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		// The credential is refused (AuthenticationFailed: a wrong key,
		// signature or token), or may not do this (Authorization*):
		// every call like it fails alike.
		return fmt.Errorf("aztable: %s: %w: %w", op, adapters.ErrAccessDenied, err)
	case st == http.StatusNotFound && code == "TableNotFound":
		return fmt.Errorf("aztable: %s: %w: %w", op, adapters.ErrKeyspaceGone, err)
	case st == http.StatusBadRequest || st == http.StatusRequestEntityTooLarge:
		// The request itself is refused (a property, key or size the
		// service will never take): sending it again cannot help.
		return fmt.Errorf("aztable: %s: %w: %w", op, adapters.ErrInvalid, err)
	}
	return fmt.Errorf("aztable: %s: %w", op, err)
}

// forEach runs fn(0..n-1) with at most par at once and returns the first
// error. If ctx ends before every fn has started, it returns ctx's error:
// a call that did not run all of them must not report success (a write
// the store never received would count as written).
func forEach(ctx context.Context, n, par int, fn func(ctx context.Context, i int) error) error {
	if n == 1 {
		return fn(ctx, 0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		if err := ctx.Err(); err != nil {
			<-sem
			once.Do(func() { first = err })
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	return first
}

// decodeEntity parses one entity of a service response into its record.
func decodeEntity(raw []byte) (adapters.Record, error) {
	e, err := tablecodec.ParseJSONEntity(raw)
	if err != nil {
		return adapters.Record{}, fmt.Errorf("aztable: service returned an entity nemo cannot read: %w", err)
	}
	return adapters.Record{Key: tablecodec.EncodeKey(e.PartitionKey, e.RowKey), Value: tablecodec.EncodeEntity(e), Version: adapters.Version(e.ETag)}, nil
}

// payload returns the raw body the SDK read. The SDK re-marshals entities
// from map[string]any, which loses the difference between 2 and 2.0, so
// the adapter reads the service's own bytes instead.
func payload(resp *http.Response) ([]byte, error) {
	if resp == nil {
		return nil, errors.New("aztable: no response captured")
	}
	return runtime.Payload(resp)
}

// Get implements adapters.Store: one point read per key, in parallel. A
// record's Version is the entity's ETag as the service returns it
// (odata.etag, else the ETag header); catalog records have none. An
// entity this Store wrote and that has not changed since reads with the
// Timestamp and ETag nemo stamped it with (see stampMemo).
func (s *Store) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	if ks == tablecodec.TablesKeyspace {
		return s.getTables(ctx, keys)
	}
	out := make([]adapters.Record, len(keys))
	for i, k := range keys {
		out[i].Key = k
	}
	if len(keys) == 0 {
		return out, nil
	}
	calls, err := getPlan(keys)
	if err != nil {
		return nil, err
	}
	mark := s.memo.mark()
	err = forEach(ctx, len(calls), s.par, func(ctx context.Context, c int) error {
		call := calls[c]
		if len(call.at) == 1 {
			return s.getOne(ctx, ks, call.pk, call.rks[0], keys, call.at[0], out, mark)
		}
		return s.getMany(ctx, ks, call, keys, out, mark)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// maxKeysPerQuery is how many row keys one query of a Get names: the
// service permits at most 15 discrete comparisons in a $filter, one of
// which is the partition key's.
const maxKeysPerQuery = 14

// getCall is one request of a Get: a point read (one key), or a query of
// up to maxKeysPerQuery row keys of one partition.
type getCall struct {
	pk  string
	rks []string
	at  []int // the keys' positions in the Get
}

// getPlan groups keys into requests: the keys of a partition, in queries of
// up to maxKeysPerQuery (so settling a written-back batch of 100 entities
// costs 8 requests, not 100), a key alone in its partition as a point read.
func getPlan(keys [][]byte) ([]getCall, error) {
	var calls []getCall
	open := map[string]int{} // partition -> its call being filled
	for i, k := range keys {
		pk, rk, err := tablecodec.DecodeKey(k)
		if err != nil {
			return nil, fmt.Errorf("aztable: get key %d: %w: %w", i, adapters.ErrInvalid, err)
		}
		c, ok := open[pk]
		if !ok || len(calls[c].at) == maxKeysPerQuery {
			c = len(calls)
			calls = append(calls, getCall{pk: pk})
			open[pk] = c
		}
		calls[c].rks = append(calls[c].rks, rk)
		calls[c].at = append(calls[c].at, i)
	}
	return calls, nil
}

// getOne is a point read of key i (partition pk, row key rk) into out.
func (s *Store) getOne(ctx context.Context, ks adapters.Keyspace, pk, rk string, keys [][]byte, i int, out []adapters.Record, mark uint64) error {
	body, etag, err := s.getEntity(ctx, ks, pk, rk)
	if isNotFound(err) || errors.Is(err, errNoEntity) { // no such entity, or no such table
		return nil
	}
	if err != nil {
		return classify("get", err)
	}
	rec, err := decodeEntity(body)
	if err != nil {
		return err
	}
	rec.Key = keys[i]
	if rec.Version == "" {
		rec.Version = adapters.Version(etag)
	}
	out[i] = s.memo.restore(ks, rec, mark)
	return nil
}

// getMany reads the keys of call, all of one partition, with one query
// (following continuations, which the service may send even for a small
// answer) into out; a key the answer does not hold is absent.
func (s *Store) getMany(ctx context.Context, ks adapters.Keyspace, call getCall, keys [][]byte, out []adapters.Record, mark uint64) error {
	var f strings.Builder
	f.WriteString("PartitionKey eq " + quote(call.pk) + " and (")
	for j, rk := range call.rks {
		if j > 0 {
			f.WriteString(" or ")
		}
		f.WriteString("RowKey eq " + quote(rk))
	}
	f.WriteString(")")
	filter, format, top := f.String(), aztables.MetadataFormatMinimal, int32(maxPageSize)
	at := make(map[string][]int, len(call.rks)) // a key named twice is answered twice
	for j, rk := range call.rks {
		at[rk] = append(at[rk], call.at[j])
	}
	pager := s.table(ks).NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter, Format: &format, Top: &top})
	for pager.More() {
		var raw rawReply
		if _, err := pager.NextPage(withRawReply(ctx, &raw)); err != nil {
			if _, code := errorCode(err); code == "TableNotFound" {
				return nil
			}
			return classify("get", err)
		}
		if !raw.ok {
			return fmt.Errorf("aztable: get: the answer's body was not kept")
		}
		var page struct {
			Value []json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(raw.body, &page); err != nil {
			return fmt.Errorf("aztable: get: unreadable query response: %w", err)
		}
		for _, v := range page.Value {
			rec, err := decodeEntity(v)
			if err != nil {
				return err
			}
			_, rk, err := tablecodec.DecodeKey(rec.Key)
			if err != nil {
				return fmt.Errorf("aztable: get: %w", err)
			}
			is, ok := at[rk]
			if !ok {
				return fmt.Errorf("aztable: get: the query for %d keys answered an entity it did not name (row key %q)", len(call.rks), rk)
			}
			for _, i := range is {
				r := rec
				r.Key = keys[i]
				out[i] = s.memo.restore(ks, r, mark)
			}
		}
	}
	return nil
}

// getEntity reads one entity: its body and ETag header. It is a direct
// request where the partition's writes are (sendsDirect: with an account
// key or a SAS, and for the partition "", which the SDK does not read);
// else the SDK's GetEntity.
func (s *Store) getEntity(ctx context.Context, ks adapters.Keyspace, pk, rk string) ([]byte, string, error) {
	if s.sendsDirect(pk) {
		return s.direct.get(ctx, string(ks), pk, rk)
	}
	var raw rawReply
	format := aztables.MetadataFormatMinimal
	resp, err := s.table(ks).GetEntity(withRawReply(ctx, &raw), pk, rk, &aztables.GetEntityOptions{Format: &format})
	if err != nil {
		return nil, "", err
	}
	if !raw.ok {
		return nil, "", fmt.Errorf("aztable: get: the answer's body was not kept")
	}
	return raw.body, string(resp.ETag), nil
}

// GetRange implements adapters.Store: [start, end) becomes an OData filter
// on PartitionKey and RowKey, read page by page (1000 per page at most).
// Each record's Version is its odata.etag; stamps are restored as in Get.
func (s *Store) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	if ks == tablecodec.TablesKeyspace {
		return s.rangeTables(ctx, start, end, limit)
	}
	filter, empty := RangeFilter(start, end)
	if empty {
		return nil, false, nil
	}
	top := int32(maxPageSize)
	if limit > 0 && limit < maxPageSize {
		top = int32(limit)
	}
	format := aztables.MetadataFormatMinimal
	lo := &aztables.ListEntitiesOptions{Top: &top, Format: &format}
	if filter != "" {
		lo.Filter = &filter
	}
	pager := s.table(ks).NewListEntitiesPager(lo)
	mark := s.memo.mark()
	var out []adapters.Record
	for pager.More() && (limit <= 0 || len(out) < limit) {
		var raw rawReply
		if _, err := pager.NextPage(withRawReply(ctx, &raw)); err != nil {
			if _, code := errorCode(err); code == "TableNotFound" {
				adapters.ReportBatch(ctx, true, nil) // the service's own answer: nothing there
				return nil, false, nil
			}
			return nil, false, classify("get_range", err)
		}
		if !raw.ok {
			return nil, false, fmt.Errorf("aztable: get_range: the answer's body was not kept")
		}
		var page struct {
			Value []json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(raw.body, &page); err != nil {
			return nil, false, fmt.Errorf("aztable: get_range: unreadable query response: %w", err)
		}
		var last []byte
		for _, v := range page.Value {
			rec, err := decodeEntity(v)
			if err != nil {
				return nil, false, err
			}
			last = rec.Key
			out = append(out, s.memo.restore(ks, rec, mark))
		}
		// A page is the last only without continuation headers: a short
		// or empty one with them says nothing about what follows.
		adapters.ReportBatch(ctx, !pager.More(), last)
	}
	if limit > 0 && len(out) >= limit {
		more := len(out) > limit || pager.More()
		return out[:limit], more, nil
	}
	return out, false, nil
}

// --- tables ---

// CreateTable creates a table; one that exists already is not an error.
func (s *Store) CreateTable(ctx context.Context, name string) error {
	_, err := s.svc.CreateTable(ctx, name, nil)
	if _, code := errorCode(err); err != nil && code != "TableAlreadyExists" {
		return classify("create_table", err)
	}
	return nil
}

// DeleteTable deletes a table; an absent one is not an error.
func (s *Store) DeleteTable(ctx context.Context, name string) error {
	_, err := s.svc.DeleteTable(ctx, name, nil)
	if err != nil && !isNotFound(err) {
		return classify("delete_table", err)
	}
	s.mu.Lock()
	delete(s.tabs, adapters.Keyspace(name))
	s.mu.Unlock()
	return nil
}

// CreateKeyspace implements adapters.KeyspaceAdmin: the keyspace is the
// table of that name.
func (s *Store) CreateKeyspace(ctx context.Context, ks adapters.Keyspace) error {
	if ks == tablecodec.TablesKeyspace {
		return fmt.Errorf("aztable: create %q: %w", ks, adapters.ErrInvalid)
	}
	return s.CreateTable(ctx, string(ks))
}

// DropKeyspace implements adapters.KeyspaceAdmin: it deletes the table.
func (s *Store) DropKeyspace(ctx context.Context, ks adapters.Keyspace) error {
	if ks == tablecodec.TablesKeyspace {
		return fmt.Errorf("aztable: drop %q: %w", ks, adapters.ErrInvalid)
	}
	return s.DeleteTable(ctx, string(ks))
}

// listTables returns the account's tables as TablesKeyspace records, in
// key order.
func (s *Store) listTables(ctx context.Context) ([]adapters.Record, error) {
	pager := s.svc.NewListTablesPager(nil)
	var out []adapters.Record
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, classify("list_tables", err)
		}
		for _, t := range page.Tables {
			if t.Name != nil {
				out = append(out, adapters.Record{Key: tablecodec.TableKey(*t.Name), Value: []byte(*t.Name)})
			}
		}
	}
	slices.SortFunc(out, func(a, b adapters.Record) int { return bytes.Compare(a.Key, b.Key) })
	return out, nil
}

func (s *Store) getTables(ctx context.Context, keys [][]byte) ([]adapters.Record, error) {
	all, err := s.listTables(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]adapters.Record, len(keys))
	for i, k := range keys {
		out[i].Key = k
		if j, ok := slices.BinarySearchFunc(all, k, func(r adapters.Record, k []byte) int { return bytes.Compare(r.Key, k) }); ok {
			out[i].Value = all[j].Value
		}
	}
	return out, nil
}

func (s *Store) rangeTables(ctx context.Context, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	all, err := s.listTables(ctx)
	if err != nil {
		return nil, false, err
	}
	adapters.ReportBatch(ctx, true, nil) // the whole list, every page of it
	var out []adapters.Record
	for _, r := range all {
		if bytes.Compare(r.Key, start) < 0 || (end != nil && bytes.Compare(r.Key, end) >= 0) {
			continue
		}
		if limit > 0 && len(out) == limit {
			return out, true, nil
		}
		out = append(out, r)
	}
	return out, false, nil
}

// checkTables validates writes of TablesKeyspace records, which change
// nothing in the service: the account's table list is the catalog, and
// tables are created and deleted only through CreateKeyspace and
// DropKeyspace, which the engine orders before any later access to the
// table. (Creating or deleting here as well would let a late write-back of
// an old catalog record undo a newer drop or create.)
//
// Catalog records have no versions, and since their writes change nothing
// there is nothing for a precondition to protect: preconditions on them
// are accepted without a check, and no write is refused.
func checkTables(ws []adapters.Write) error {
	for _, w := range ws {
		if !strings.EqualFold(string(w.Key), string(w.Value)) {
			return fmt.Errorf("aztable: table record %q names %q: %w", w.Key, w.Value, adapters.ErrInvalid)
		}
	}
	return nil
}
