package datastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	gtransport "google.golang.org/api/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/internal/deadline"
)

// Service limits the adapter splits batches to.
const (
	maxLookupKeys      = 1000
	maxCommitMutations = 500
	// maxCommitBytes stays under the 10 MiB request limit with room for
	// the request envelope.
	maxCommitBytes = 9 << 20
	// pageSize bounds one RunQuery batch.
	pageSize = 500
)

const (
	prodEndpoint = "datastore.googleapis.com:443"
	scope        = "https://www.googleapis.com/auth/datastore"
)

// Options configures Open. The zero value of a field means its default:
// call EnsureDefaults to fill them in, then Validate (Open does both).
type Options struct {
	// EmulatorHost is the host:port of a Datastore emulator. Empty means
	// the DATASTORE_EMULATOR_HOST environment variable; if that is empty
	// too, the production endpoint with Google default credentials.
	EmulatorHost string
	// ClientOptions are appended to the production dial options
	// (credentials file, endpoint override, ...).
	ClientOptions []option.ClientOption
	// Retries is how many times one call is retried after a failure its
	// rules retry (see the package doc); -1 for none. Default 6.
	Retries int
	// RetryBase bounds the first pause before a retry (and before a
	// transaction is run again): each pause is drawn at random up to a
	// bound that starts at RetryBase and doubles per retry up to 5s
	// (gax.Backoff). Default 50ms.
	RetryBase time.Duration
	// Interceptors are chained on the connection Open dials, outermost
	// first (backend.contract puts adapters/contract here).
	Interceptors []grpc.UnaryClientInterceptor
	// Project and Database name the database Ping reads (backend.datastore.project
	// and .database); without a Project, Ping fails with ErrInvalid.
	Project, Database string
	Logger            *slog.Logger
}

// EnsureDefaults sets every zero field of o to its default (see each
// field's comment); calling it again changes nothing.
func (o *Options) EnsureDefaults() {
	if o.Retries == 0 {
		o.Retries = 6
	}
	if o.RetryBase == 0 {
		o.RetryBase = 50 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports every problem with the options at once, joined with
// errors.Join. It assumes EnsureDefaults has run and never changes o.
func (o Options) Validate() error {
	var errs []error
	if o.Retries < -1 {
		errs = append(errs, fmt.Errorf("datastore: retries %d: want -1 (none) or more", o.Retries))
	}
	if o.RetryBase < 0 {
		errs = append(errs, fmt.Errorf("datastore: retry base %v is negative", o.RetryBase))
	}
	return errors.Join(errs...)
}

// Store is an adapters.Store over Datastore. Safe for concurrent use.
type Store struct {
	client   datastorepb.DatastoreClient
	conn     *grpc.ClientConn // nil when a test gave the client
	opts     Options
	endpoint string // the emulator's host:port, or the service's (Endpoint)
	closed   atomic.Bool
	// rangesOutside and snapRangesOutside are set once the backend has
	// refused a key-range query inside a read-write, or a read-only,
	// transaction (atomic.go, snapshot.go).
	rangesOutside, snapRangesOutside atomic.Bool
	// flavour is what the backend's first answers showed it to be.
	flavour atomic.Int32
}

// The backend flavours flavour tells apart: entities of the legacy
// Datastore emulator carry no create or update time and its Lookup and
// RunQuery answers no read time; those of Firestore in Datastore mode (the
// service and its emulator) do, so any read tells, even one that finds
// nothing.
const (
	flavourUnknown int32 = iota
	legacyDatastore
	firestoreDatastore
)

// observe records the flavour an answer shows: whether it carries
// Firestore's times (an entity's update time, a read's read time). The
// first answer decides.
func (s *Store) observe(updateTimes bool) {
	f := legacyDatastore
	if updateTimes {
		f = firestoreDatastore
	}
	if s.flavour.CompareAndSwap(flavourUnknown, f) {
		s.opts.Logger.Debug("datastore adapter: backend flavour", "legacy", f == legacyDatastore)
	}
}

// firestoreTimes reports whether a read's answer carries Firestore's
// times: a read time, or an update time on an entity.
func firestoreTimes(readTime *timestamppb.Timestamp, results []*datastorepb.EntityResult) bool {
	return readTime != nil || slices.ContainsFunc(results, func(r *datastorepb.EntityResult) bool { return r.GetUpdateTime() != nil })
}

var _ adapters.Store = (*Store)(nil)

// Open dials Datastore (see Options.EmulatorHost).
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	host := opts.EmulatorHost
	if host == "" {
		host = os.Getenv("DATASTORE_EMULATOR_HOST")
	}
	// No retries below the adapter's: a retry policy in a service config
	// (one a name resolver hands out, or a dial option) would send a
	// Commit again behind sendCommit's back, and its unknown outcome
	// would read as the retry's answer. gRPC's transparent retries stay:
	// they resend only what the server never processed.
	//
	// Answers may be as big as the service makes them: gRPC's default
	// limit of 4 MiB on a received message would refuse a Lookup or a
	// query batch of a few entities of up to 1 MiB each (Google's own
	// generated clients lift it the same way).
	dial := []grpc.DialOption{grpc.WithChainUnaryInterceptor(opts.Interceptors...), grpc.WithDisableRetry(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32))}
	var conn *grpc.ClientConn
	var err error
	endpoint := prodEndpoint
	if host != "" {
		host = strings.TrimPrefix(strings.TrimPrefix(host, "http://"), "https://")
		endpoint = host
		conn, err = grpc.NewClient("passthrough:///"+host, append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		opts.Logger.Info("datastore adapter: using emulator", "host", host)
	} else {
		o := []option.ClientOption{option.WithEndpoint(prodEndpoint), option.WithScopes(scope)}
		for _, d := range dial {
			o = append(o, option.WithGRPCDialOption(d))
		}
		conn, err = gtransport.Dial(ctx, append(o, opts.ClientOptions...)...)
	}
	if err != nil {
		return nil, fmt.Errorf("datastore: dial: %w", err)
	}
	return &Store{client: datastorepb.NewDatastoreClient(conn), conn: conn, opts: opts, endpoint: endpoint}, nil
}

// Close closes the connection Open made. Later calls fail with
// adapters.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) || s.conn == nil {
		return nil
	}
	return s.conn.Close()
}

// routed adds the routing headers Datastore uses for named databases.
func routed(ctx context.Context, p dscodec.Partition) context.Context {
	prefix := "projects/" + url.QueryEscape(p.Project)
	params := "project_id=" + url.QueryEscape(p.Project)
	if p.Database != "" {
		prefix += "/databases/" + url.QueryEscape(p.Database)
		params += "&database_id=" + url.QueryEscape(p.Database)
	}
	return metadata.AppendToOutgoingContext(ctx, "google-cloud-resource-prefix", prefix, "x-goog-request-params", params)
}

// retryable is the failures a call outside a transaction retries (the
// package doc says why, and how they differ from the service's published
// client defaults).
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.ResourceExhausted, codes.DeadlineExceeded:
		return true
	}
	return false
}

// maxBackoff caps the bound of a pause before a retry.
const maxBackoff = 5 * time.Second

// backoff is the pauses between the retries of one call, or between the
// runs of one transaction.
func (s *Store) backoff() gax.Backoff {
	return gax.Backoff{Initial: s.opts.RetryBase, Max: maxBackoff, Multiplier: 2}
}

// call runs one RPC with retries and maps its failure to the adapters
// errors.
func (s *Store) call(ctx context.Context, op string, f func(context.Context) error) error {
	return s.callRetrying(ctx, op, retryable, f)
}

// callRetrying is call retrying the failures retry accepts, at most
// Options.Retries times (see invoke). retry sees f's own error (gax hands
// its retryer an apierror), once per failure, and not once ctx has ended.
func (s *Store) callRetrying(ctx context.Context, op string, retry func(error) bool, f func(context.Context) error) error {
	if s.closed.Load() {
		return adapters.ErrClosed
	}
	r := s.invoke(ctx, op, max(s.opts.Retries, 0)+1, retry, f)
	if r.err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("datastore: %s: %w", op, ctx.Err())
	}
	err := r.last
	if _, ok := status.FromError(err); ok {
		err = serviceError{err}
	}
	switch {
	case r.late:
		return fmt.Errorf("datastore: %s: %d attempts, and another would not end before the deadline: %w: %w", op, r.runs, adapters.ErrUnavailable, err)
	case r.exhausted:
		return fmt.Errorf("datastore: %s: %w: %w", op, adapters.ErrUnavailable, err)
	case status.Code(err) == codes.InvalidArgument:
		return fmt.Errorf("datastore: %s: %w: %w", op, adapters.ErrInvalid, err)
	case status.Code(err) == codes.Unauthenticated || status.Code(err) == codes.PermissionDenied:
		return fmt.Errorf("datastore: %s: %w: %w", op, adapters.ErrAccessDenied, err)
	}
	return fmt.Errorf("datastore: %s: %w", op, err)
}

// rerun runs a transaction (run) again from its start while it fails with
// an error again accepts (it applied nothing), at most maxAtomicAttempts
// times in all (see invoke); then it fails with adapters.ErrAborted
// wrapping the last answer. It fails so too, earlier, when another run
// would not end before ctx's deadline.
func (s *Store) rerun(ctx context.Context, op string, again func(error) bool, run func(context.Context) error) error {
	r := s.invoke(ctx, op, maxAtomicAttempts, again, run)
	switch {
	case r.err == nil:
		return nil
	case !again(r.last):
		return r.last
	case r.late:
		return fmt.Errorf("datastore: %s: aborted %d times, and another run would not end before the deadline: %w: %w", op, r.runs, adapters.ErrAborted, r.last)
	case r.exhausted:
		return fmt.Errorf("datastore: %s: aborted %d times: %w: %w", op, r.runs, adapters.ErrAborted, r.last)
	}
	return fmt.Errorf("datastore: %s: %w", op, ctx.Err())
}

// invoked is how invoke ended: err is gax.Invoke's, last f's last error;
// runs counts f's runs; exhausted says that more accepted the last failure
// but no run was left, late that no run was started because it would not
// end before the deadline.
type invoked struct {
	err, last       error
	runs            int
	exhausted, late bool
}

// invoke runs f under gax.Invoke, the retry loop of Google's generated
// clients, paused by backoff, at most runs times, again after each
// failure more accepts (f's own error; more is not asked once ctx has
// ended). It does not start a run it cannot expect to end before ctx's
// deadline (for a commit that outlives its request's deadline, that
// request deadline: internal/deadline.Retry): when the pause and a run
// half as long again as the last would reach it, it stops and reports
// late. A call then ends with the last failure (for
// a transaction the service aborted, its ABORTED, which clients retry)
// while there is time to answer it, rather than being cut short by the
// deadline with nothing definite to say: under contention each run of a
// transaction waits out the service's lock timeout (2 s in Firestore's
// emulator), and a frontend's request may have only a few seconds
// (listen.request_timeout, or its client's own deadline).
func (s *Store) invoke(ctx context.Context, op string, runs int, more func(error) bool, f func(context.Context) error) invoked {
	if adapters.SingleAttempt(ctx) {
		runs = 1
	}
	var r invoked
	var started time.Time
	bo := s.backoff()
	r.err = gax.Invoke(ctx, func(ctx context.Context, _ gax.CallSettings) error {
		started = time.Now()
		r.runs++
		r.last = f(ctx)
		return r.last
	}, gax.WithRetry(func() gax.Retryer {
		return retryFunc(func(error) (time.Duration, bool) {
			if ctx.Err() != nil || !more(r.last) {
				return 0, false
			}
			if r.runs >= runs {
				r.exhausted = true
				return 0, false
			}
			pause := bo.Pause()
			if d, ok := deadline.Retry(ctx); ok && time.Until(d) < pause+time.Since(started)*3/2 {
				r.late = true
				return 0, false
			}
			s.opts.Logger.Debug("datastore adapter: retrying", "op", op, "err", r.last, "run", r.runs+1)
			return pause, true
		})
	}))
	return r
}

// retryFunc is a gax.Retryer.
type retryFunc func(error) (time.Duration, bool)

func (f retryFunc) Retry(err error) (time.Duration, bool) { return f(err) }

// serviceError is a status the service answered (or gRPC made for a call
// that did not reach it): it keeps the status, so a frontend can pass it
// on as it is (GRPCStatus), and names it for the failure log
// (adapters.ServiceError).
type serviceError struct{ err error }

func (e serviceError) Error() string { return e.err.Error() }

func (e serviceError) Unwrap() error { return e.err }

// GRPCStatus is the service's status.
func (e serviceError) GRPCStatus() *status.Status { return status.Convert(e.err) }

// ServiceStatus implements adapters.ServiceError.
func (e serviceError) ServiceStatus() (code, message string) {
	st := status.Convert(e.err)
	return st.Code().String(), st.Message()
}

func partition(ks adapters.Keyspace) (dscodec.Partition, error) {
	p, err := dscodec.ParseKeyspace(ks)
	if err != nil {
		return p, fmt.Errorf("datastore: %w: %w", adapters.ErrInvalid, err)
	}
	return p, nil
}

func partitionID(p dscodec.Partition) *datastorepb.PartitionId {
	return &datastorepb.PartitionId{ProjectId: p.Project, DatabaseId: p.Database, NamespaceId: p.Namespace}
}

func keyOf(p dscodec.Partition, path []*datastorepb.Key_PathElement) *datastorepb.Key {
	return &datastorepb.Key{PartitionId: partitionID(p), Path: path}
}

func decodeKey(p dscodec.Partition, k []byte) (*datastorepb.Key, error) {
	path, err := dscodec.DecodePath(k)
	if err != nil {
		return nil, fmt.Errorf("datastore: %w: %w", adapters.ErrInvalid, err)
	}
	return keyOf(p, path), nil
}

// result turns a backend EntityResult into the engine value.
func result(r *datastorepb.EntityResult) ([]byte, []byte, error) {
	k, err := dscodec.EncodeKey(r.GetEntity().GetKey())
	if err != nil {
		return nil, nil, fmt.Errorf("datastore: backend returned a bad key: %w", err)
	}
	v, err := dscodec.EncodeValue(r)
	if err != nil {
		return nil, nil, fmt.Errorf("datastore: backend returned a bad entity: %w", err)
	}
	return k, v, nil
}

// Get implements adapters.Store: Lookup in batches of 1000, asking again for
// deferred keys until each is found or missing. A found entity's version is
// its EntityResult.version in decimal; a missing one has none.
func (s *Store) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	p, err := partition(ks)
	if err != nil {
		return nil, err
	}
	found, err := s.lookup(routed(ctx, p), p, keys)
	if err != nil {
		return nil, err
	}
	return inOrder(keys, found), nil
}

// inOrder is one record per key, in the order of keys, from what a lookup
// found (a key not found has no value).
func inOrder(keys [][]byte, found map[string]adapters.Record) []adapters.Record {
	out := make([]adapters.Record, len(keys))
	for i, k := range keys {
		r := found[string(k)]
		out[i] = adapters.Record{Key: k, Value: r.Value, Version: r.Version}
	}
	return out
}

// lookup reads keys (repeats allowed) with Lookups of at most
// maxLookupKeys keys, following deferred keys, and returns the found
// records, with their versions, by engine key. ctx must be routed.
func (s *Store) lookup(ctx context.Context, p dscodec.Partition, keys [][]byte) (map[string]adapters.Record, error) {
	return s.lookupIn(ctx, p, keys, nil)
}

// lookupIn is lookup inside the transaction tx (nil: none). Inside a
// transaction an ABORTED answer is not retried: the transaction is over.
func (s *Store) lookupIn(ctx context.Context, p dscodec.Partition, keys [][]byte, tx []byte) (map[string]adapters.Record, error) {
	retry := retryable
	var ro *datastorepb.ReadOptions
	if tx != nil {
		retry = retryableInTx
		ro = &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_Transaction{Transaction: tx}}
	}
	found := make(map[string]adapters.Record, len(keys))
	var pending []*datastorepb.Key
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[string(k)] {
			continue
		}
		seen[string(k)] = true
		dk, err := decodeKey(p, k)
		if err != nil {
			return nil, err
		}
		pending = append(pending, dk)
	}
	for len(pending) > 0 {
		batch := pending[:min(len(pending), maxLookupKeys)]
		pending = pending[len(batch):]
		var resp *datastorepb.LookupResponse
		err := s.callRetrying(ctx, "lookup", retry, func(ctx context.Context) (err error) {
			resp, err = s.client.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: p.Project, DatabaseId: p.Database, Keys: batch, ReadOptions: ro})
			return err
		})
		if err != nil {
			return nil, err
		}
		s.observe(firestoreTimes(resp.GetReadTime(), resp.GetFound()))
		for _, r := range resp.Found {
			k, v, err := result(r)
			if err != nil {
				return nil, err
			}
			found[string(k)] = adapters.Record{Key: k, Value: v, Version: version(r.Version)}
		}
		if n := len(resp.Found) + len(resp.Missing) + len(resp.Deferred); n != len(batch) {
			// Every key is found, missing or deferred: one the answer
			// left out would read as absent.
			return nil, fmt.Errorf("datastore: lookup of %d keys answered %d", len(batch), n)
		}
		pending = append(pending, resp.Deferred...)
	}
	return found, nil
}

func keyFilter(op datastorepb.PropertyFilter_Operator, k *datastorepb.Key) *datastorepb.Filter {
	return &datastorepb.Filter{FilterType: &datastorepb.Filter_PropertyFilter{PropertyFilter: &datastorepb.PropertyFilter{
		Property: &datastorepb.PropertyReference{Name: "__key__"},
		Op:       op,
		Value:    &datastorepb.Value{ValueType: &datastorepb.Value_KeyValue{KeyValue: k}},
	}}}
}

// lowerBound is the tightest Datastore filter admitting every key >= b.
// Keys are compared in byte order, so for the encoding of a key k: b == k is
// "__key__ >= k"; b == k‖0x00 (adapters.Successor) is "__key__ > k"; any
// other b is bounded below by its longest whole-element prefix, and the
// results are trimmed.
func lowerBound(p dscodec.Partition, b []byte) *datastorepb.Filter {
	path, rest := dscodec.DecodePrefix(b)
	if len(path) == 0 {
		return nil
	}
	switch {
	case len(rest) == 0:
		return keyFilter(datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL, keyOf(p, path))
	case bytes.Equal(rest, []byte{0}):
		return keyFilter(datastorepb.PropertyFilter_GREATER_THAN, keyOf(p, path))
	default:
		return keyFilter(datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL, keyOf(p, path))
	}
}

// upperBound is the tightest Datastore filter admitting every key < e:
// e == k is "__key__ < k", e == k‖0x00 is "__key__ <= k". For any other e
// with whole-element prefix k, every key below e is k, a descendant of k or
// below k, so it is below k's next sibling (the next id, or the name with a
// zero byte appended); with no such sibling there is no bound.
func upperBound(p dscodec.Partition, e []byte) *datastorepb.Filter {
	path, rest := dscodec.DecodePrefix(e)
	switch {
	case len(path) == 0:
		return nil
	case len(rest) == 0:
		return keyFilter(datastorepb.PropertyFilter_LESS_THAN, keyOf(p, path))
	case bytes.Equal(rest, []byte{0}):
		return keyFilter(datastorepb.PropertyFilter_LESS_THAN_OR_EQUAL, keyOf(p, path))
	}
	last := proto.Clone(path[len(path)-1]).(*datastorepb.Key_PathElement)
	switch id := last.IdType.(type) {
	case *datastorepb.Key_PathElement_Id:
		if id.Id == math.MaxInt64 {
			return nil
		}
		last.IdType = &datastorepb.Key_PathElement_Id{Id: id.Id + 1}
	case *datastorepb.Key_PathElement_Name:
		last.IdType = &datastorepb.Key_PathElement_Name{Name: id.Name + "\x00"}
	}
	sibling := append(append([]*datastorepb.Key_PathElement{}, path[:len(path)-1]...), last)
	return keyFilter(datastorepb.PropertyFilter_LESS_THAN, keyOf(p, sibling))
}

// GetRange implements adapters.Store: a kindless query ordered by __key__,
// bounded by lowerBound/upperBound and trimmed to [start, end). Its results
// are full entities, so each carries its version (EntityResult.version).
func (s *Store) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	p, err := partition(ks)
	if err != nil {
		return nil, false, err
	}
	return s.getRange(routed(ctx, p), p, start, end, limit, nil)
}

// getRange is GetRange in partition p (ctx routed), inside transaction tx
// when it is not nil.
func (s *Store) getRange(ctx context.Context, p dscodec.Partition, start, end []byte, limit int, tx []byte) ([]adapters.Record, bool, error) {
	if end != nil && bytes.Compare(start, end) >= 0 {
		return nil, false, nil
	}
	var ro *datastorepb.ReadOptions
	if tx != nil {
		ro = &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_Transaction{Transaction: tx}}
	}
	var filters []*datastorepb.Filter
	if f := lowerBound(p, start); f != nil {
		filters = append(filters, f)
	}
	if end != nil {
		if f := upperBound(p, end); f != nil {
			filters = append(filters, f)
		}
	}
	q := &datastorepb.Query{Order: []*datastorepb.PropertyOrder{{
		Property: &datastorepb.PropertyReference{Name: "__key__"}, Direction: datastorepb.PropertyOrder_ASCENDING,
	}}}
	switch len(filters) {
	case 1:
		q.Filter = filters[0]
	case 2:
		q.Filter = &datastorepb.Filter{FilterType: &datastorepb.Filter_CompositeFilter{CompositeFilter: &datastorepb.CompositeFilter{
			Op: datastorepb.CompositeFilter_AND, Filters: filters,
		}}}
	}
	var out []adapters.Record
	for {
		n := pageSize
		if limit > 0 {
			n = min(n, limit-len(out)+1) // +1: a bound may admit one key below start
		}
		q.Limit = wrapperspb.Int32(int32(n))
		var resp *datastorepb.RunQueryResponse
		err := s.call(ctx, "runQuery", func(ctx context.Context) (err error) {
			resp, err = s.client.RunQuery(ctx, &datastorepb.RunQueryRequest{
				ProjectId: p.Project, DatabaseId: p.Database, PartitionId: partitionID(p), ReadOptions: ro,
				QueryType: &datastorepb.RunQueryRequest_Query{Query: q},
			})
			return err
		})
		if err != nil {
			return nil, false, err
		}
		batch := resp.GetBatch()
		s.observe(firestoreTimes(batch.GetReadTime(), batch.GetEntityResults()))
		recs := make([]adapters.Record, len(batch.GetEntityResults()))
		for i, r := range batch.GetEntityResults() {
			k, v, err := result(r)
			if err != nil {
				return nil, false, err
			}
			recs[i] = adapters.Record{Key: k, Value: v, Version: version(r.Version)}
		}
		done := finished(batch, n)
		var last []byte
		if len(recs) > 0 {
			last = recs[len(recs)-1].Key
		}
		adapters.ReportBatch(ctx, done, last)
		for _, r := range recs {
			if bytes.Compare(r.Key, start) < 0 {
				continue
			}
			if end != nil && bytes.Compare(r.Key, end) >= 0 {
				return out, false, nil
			}
			if limit > 0 && len(out) == limit {
				return out, true, nil
			}
			out = append(out, r)
		}
		if done {
			return out, false, nil
		}
		if limit > 0 && len(out) == limit {
			return out, true, nil
		}
		if q.StartCursor, err = nextCursor(batch); err != nil {
			return nil, false, err
		}
	}
}

// finished reports whether a query batch is its query's last: the
// service said NO_MORE_RESULTS, or that the query ended at its limit
// (MORE_RESULTS_AFTER_LIMIT, or AFTER_CURSOR at its end cursor) having
// returned fewer results than the limit (the legacy emulator says
// MORE_RESULTS_AFTER_LIMIT for every last batch). A NOT_FINISHED batch,
// short or empty, is never the last: the query goes on from its
// end_cursor, and only the service says where it ends. limit is the
// query's limit, 0 for none.
func finished(b *datastorepb.QueryResultBatch, limit int) bool {
	switch b.GetMoreResults() {
	case datastorepb.QueryResultBatch_NOT_FINISHED:
		return false
	case datastorepb.QueryResultBatch_MORE_RESULTS_AFTER_LIMIT, datastorepb.QueryResultBatch_MORE_RESULTS_AFTER_CURSOR:
		return limit == 0 || len(b.GetEntityResults()) < limit
	}
	return true
}

// nextCursor is where a query continues after a batch that is not its
// last.
func nextCursor(b *datastorepb.QueryResultBatch) ([]byte, error) {
	if len(b.GetEndCursor()) == 0 {
		return nil, errors.New("datastore: the service answered NOT_FINISHED without an end cursor")
	}
	return b.GetEndCursor(), nil
}

// AllocateIDs completes incomplete keys through the backend's allocator.
func (s *Store) AllocateIDs(ctx context.Context, project, database string, keys []*datastorepb.Key) ([]*datastorepb.Key, error) {
	ctx = routed(ctx, dscodec.Partition{Project: project, Database: database})
	var resp *datastorepb.AllocateIdsResponse
	err := s.call(ctx, "allocateIds", func(ctx context.Context) (err error) {
		resp, err = s.client.AllocateIds(ctx, &datastorepb.AllocateIdsRequest{ProjectId: project, DatabaseId: database, Keys: keys})
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(resp.Keys) != len(keys) {
		return nil, errors.New("datastore: allocateIds returned the wrong number of keys")
	}
	return resp.Keys, nil
}

// ReserveIDs keeps the backend's allocator from handing out these ids.
func (s *Store) ReserveIDs(ctx context.Context, project, database string, keys []*datastorepb.Key) error {
	ctx = routed(ctx, dscodec.Partition{Project: project, Database: database})
	return s.call(ctx, "reserveIds", func(ctx context.Context) error {
		_, err := s.client.ReserveIds(ctx, &datastorepb.ReserveIdsRequest{ProjectId: project, DatabaseId: database, Keys: keys})
		return err
	})
}

// ListKeyspaces implements adapters.KeyspaceLister for a prefix naming a
// project and database ("datastore/<project>/<database>/", as
// dscodec.Partition.Keyspace spells the default namespace): the
// keyspaces of the namespaces that hold entities, from the service's
// __namespace__ query.
func (s *Store) ListKeyspaces(ctx context.Context, prefix string) ([]adapters.Keyspace, error) {
	p, err := partition(adapters.Keyspace(prefix))
	if err != nil || p.Namespace != "" {
		return nil, fmt.Errorf("datastore: %w: %q does not name a project and database", adapters.ErrInvalid, prefix)
	}
	q := &datastorepb.Query{Kind: []*datastorepb.KindExpression{{Name: "__namespace__"}},
		Projection: []*datastorepb.Projection{{Property: &datastorepb.PropertyReference{Name: "__key__"}}}}
	ents, err := s.queryAll(routed(ctx, p), p, q)
	if err != nil {
		return nil, err
	}
	var out []adapters.Keyspace
	for _, e := range ents {
		path := e.GetKey().GetPath()
		if len(path) != 1 {
			continue
		}
		ns := dscodec.Partition{Project: p.Project, Database: p.Database, Namespace: path[0].GetName()} // id 1: the default namespace
		out = append(out, ns.Keyspace())
	}
	slices.Sort(out)
	return out, nil
}

// queryAll runs q (no limit, offset or cursors) in partition p (ctx
// routed) to its end, batch after batch, and returns its entities.
func (s *Store) queryAll(ctx context.Context, p dscodec.Partition, q *datastorepb.Query) ([]*datastorepb.Entity, error) {
	var out []*datastorepb.Entity
	for {
		var resp *datastorepb.RunQueryResponse
		err := s.call(ctx, "runQuery", func(ctx context.Context) (err error) {
			resp, err = s.client.RunQuery(ctx, &datastorepb.RunQueryRequest{ProjectId: p.Project, DatabaseId: p.Database,
				PartitionId: partitionID(p), QueryType: &datastorepb.RunQueryRequest_Query{Query: q}})
			return err
		})
		if err != nil {
			return nil, err
		}
		batch := resp.GetBatch()
		for _, r := range batch.GetEntityResults() {
			out = append(out, r.GetEntity())
		}
		if finished(batch, 0) {
			return out, nil
		}
		if q.StartCursor, err = nextCursor(batch); err != nil {
			return nil, err
		}
	}
}

// MetadataEntities returns every entity of the metadata kind (__kind__
// or __property__) in the namespace of partition ks, as the service lists
// them, following its batches to the end. The frontend answers a metadata
// query from them (filters, order, limit, offset and cursors of its own),
// when the buffer holds nothing the backend has not seen in the namespace.
func (s *Store) MetadataEntities(ctx context.Context, ks adapters.Keyspace, kind string) ([]*datastorepb.Entity, error) {
	p, err := partition(ks)
	if err != nil {
		return nil, err
	}
	return s.queryAll(routed(ctx, p), p, &datastorepb.Query{Kind: []*datastorepb.KindExpression{{Name: kind}}})
}
