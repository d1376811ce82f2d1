package aztable

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/internal/deadline"
	"github.com/nemocache/nemo/internal/obs"
	"github.com/nemocache/nemo/txn"
)

// Options configure a Frontend.
type Options struct {
	// Account is the account name in the path (default devstoreaccount1).
	Account string
	// Key is the account key (base64) requests are signed with.
	Key string
	// AllowAnonymous accepts requests without an Authorization header
	// or a shared access signature (signed ones are still verified).
	AllowAnonymous bool
	// SASAcceptHTTP accepts a shared access signature restricted to
	// HTTPS (spr=https) on a plain-HTTP request. The service refuses it
	// (403 AuthorizationProtocolMismatch), and so does nemo by default;
	// a sidecar reached over loopback, whose requests never leave the
	// pod, may set it so that clients keep the SAS they use with Azure.
	SASAcceptHTTP bool
	// RequireSAS refuses Shared Key, Shared Key Lite and anonymous
	// requests from clients not on loopback (internal/loopback, by the
	// connection's peer address): they must carry a shared access
	// signature, so a remote client holds only what its SAS grants, for as
	// long as it lasts, never the account key. Clients on loopback (the
	// pod's own application) are exempt.
	RequireSAS bool
	// BodyCacheBytes bounds the cache of point-read response bodies (see
	// bodyCache); 0 disables it.
	BodyCacheBytes int64
	// MaxRequestBytes bounds a request body (default 4 MiB, the $batch
	// limit); larger ones get 413 RequestBodyTooLarge.
	MaxRequestBytes int64
	Logger          *slog.Logger
}

// DefaultAccount is Azurite's development account.
const DefaultAccount = "devstoreaccount1"

// apiVersion is the x-ms-version answered when a request names none.
const apiVersion = "2019-02-02"

// Frontend serves the Azure Table REST API over an engine.
type Frontend struct {
	eng  *txn.Engine
	opts Options
	key  []byte
	log  *slog.Logger

	clock atomic.Int64
	// macs pools keyed HMACs for signature checks; dates caches the
	// last request date parsed.
	macs  sync.Pool
	dates dateCache
	// meta remembers the last response address strings (entityMeta).
	meta atomic.Pointer[metaMemo]
	// bodies caches the JSON of hot point reads (nil: off).
	bodies *bodyCache
}

// New builds the frontend over engine. Tables are the engine's keyspaces,
// listed in the catalog tablecodec.TablesKeyspace.
func New(engine *txn.Engine, opts Options) (*Frontend, error) {
	if opts.Account == "" {
		opts.Account = DefaultAccount
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = 4 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	key, err := base64.StdEncoding.DecodeString(opts.Key)
	if err != nil {
		return nil, fmt.Errorf("aztable: account key is not base64: %w", err)
	}
	if len(key) == 0 && !opts.AllowAnonymous {
		return nil, errors.New("aztable: an account key is required unless anonymous access is allowed")
	}
	if engine == nil {
		return nil, errors.New("aztable: nil engine")
	}
	return &Frontend{eng: engine, opts: opts, key: key, log: opts.Logger, bodies: newBodyCache(opts.BodyCacheBytes)}, nil
}

// Name is the frontend's name in logs and metrics.
func (f *Frontend) Name() string { return "azure-table" }

// methods are the verbs routed to the frontend (MERGE is Azure's own).
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions, "MERGE"}

// Register mounts the API under /<account>/ and renders echo's own errors
// (unknown routes, oversized bodies refused by middleware) as Azure errors.
func (f *Frontend) Register(e *echo.Echo) {
	for _, m := range methods {
		e.Add(m, "/"+f.opts.Account, f.serve)
		e.Add(m, "/"+f.opts.Account+"/*", f.serve)
	}
	// Every error on this listener is the service's JSON error document,
	// also for a path outside the account (a client configured with
	// another account name), which says which account nemo serves.
	otherAccount := newErr(http.StatusBadRequest, errInvalidURI.code, errInvalidURI.msg+
		" This endpoint serves the account "+f.opts.Account+" only: its URLs start with /"+f.opts.Account+"/.")
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		rq := f.newRequest(c)
		var he *echo.HTTPError
		var mbe *http.MaxBytesError
		switch {
		case !strings.HasPrefix(c.Request().URL.Path, "/"+f.opts.Account):
			rq.fail(otherAccount.because(err))
		case errors.As(err, &mbe):
			rq.fail(errBodyTooLarge.because(err))
		case errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge:
			rq.fail(errBodyTooLarge.because(err))
		case errors.As(err, &he) && he.Code == http.StatusMethodNotAllowed:
			rq.fail(errVerb.because(err))
		case errors.As(err, &he) && he.Code == http.StatusNotFound:
			rq.fail(errInvalidURI.because(err))
		default:
			rq.fail(engineError(err))
		}
	}
}

// request is one call in flight.
type request struct {
	f     *Frontend
	c     echo.Context
	r     *http.Request
	w     http.ResponseWriter
	id    string
	level tablecodec.MetadataLevel
	// notJSON is set when the Accept header names only formats other than
	// JSON (application/atom+xml, application/xml, ...): the operations
	// that answer an OData payload refuse it (415 AtomFormatNotSupported),
	// as the service does since version 2015-12-11 (JSON only), rather
	// than answering JSON to a client that asked for something else.
	notJSON bool
	// sas is the verified shared access signature the request carries
	// (nil for Shared Key and anonymous requests): what it may do.
	sas *sasToken
}

// requestIDs makes request IDs: a random process prefix and a counter, in
// a GUID's form, so that each is unique without asking for randomness per
// request.
var requestIDs = func() (ids struct {
	prefix [8]byte
	n      atomic.Uint64
}) {
	_, _ = rand.Read(ids.prefix[:])
	return
}()

func newRequestID() string {
	var g tablecodec.GUID
	copy(g[:8], requestIDs.prefix[:])
	binary.BigEndian.PutUint64(g[8:], requestIDs.n.Add(1))
	return g.String()
}

func (f *Frontend) newRequest(c echo.Context) *request {
	rq := &request{f: f, c: c, r: c.Request(), w: c.Response(), id: newRequestID(), level: tablecodec.MinimalMetadata}
	// Canonical names set directly; net/http writes the Date header.
	h := rq.w.Header()
	h["X-Ms-Request-Id"] = []string{rq.id}
	v := rq.r.Header.Get("X-Ms-Version")
	if v == "" {
		v = apiVersion
	}
	h["X-Ms-Version"] = []string{v}
	if id := rq.r.Header.Get("X-Ms-Client-Request-Id"); id != "" {
		h["X-Ms-Client-Request-Id"] = []string{id}
	}
	return rq
}

// fail writes e as the service's error response.
func (rq *request) fail(e *apiError) {
	if e.status >= 500 {
		rq.f.log.Warn("aztable: request failed", "method", rq.r.Method, "path", rq.r.URL.Path, "status", e.status, "code", e.code, "err", e.cause)
	} else if e.cause != nil {
		rq.f.log.Debug("aztable: request refused", "method", rq.r.Method, "path", rq.r.URL.Path, "status", e.status, "code", e.code, "err", e.cause)
	}
	h := rq.w.Header()
	h.Set("X-Ms-Error-Code", e.code)
	if e.status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	if rq.r.Method == http.MethodHead {
		rq.w.WriteHeader(e.status)
		return
	}
	if e.code == errFormat.code {
		// The client asked for a format other than JSON: the service
		// answers this refusal in its XML error document.
		h.Set("Content-Type", "application/xml;charset=utf-8")
		rq.w.WriteHeader(e.status)
		_, _ = rq.w.Write(xmlErrorBody(e.code, e.msg, rq.id, time.Now()))
		return
	}
	h.Set("Content-Type", "application/json;odata=minimalmetadata;streaming=true;charset=utf-8")
	rq.w.WriteHeader(e.status)
	_, _ = rq.w.Write(errorBody(e.code, e.msg, rq.id, time.Now()))
}

// reply writes a JSON body.
func (rq *request) reply(status int, body []byte) {
	h := rq.w.Header()
	h.Set("Content-Type", contentType(rq.level))
	rq.w.WriteHeader(status)
	_, _ = rq.w.Write(body)
}

func contentType(l tablecodec.MetadataLevel) string {
	switch l {
	case tablecodec.NoMetadata:
		return "application/json;odata=nometadata;streaming=true;charset=utf-8"
	case tablecodec.FullMetadata:
		return "application/json;odata=fullmetadata;streaming=true;charset=utf-8"
	}
	return "application/json;odata=minimalmetadata;streaming=true;charset=utf-8"
}

// baseURL is the service root as the client addressed it, with a trailing
// slash: what odata.metadata and odata.id are built on.
func (rq *request) baseURL() string {
	scheme := "http"
	if rq.r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + rq.r.Host + "/" + rq.f.opts.Account + "/"
}

// negotiate sets the metadata level from $format, else Accept. A $format
// naming anything but JSON is refused; an Accept header naming only other
// formats marks the request (notJSON) for the operations that answer a
// payload to refuse. Without an Accept header, or with one that admits
// any type (*/*), the answer is JSON with minimal metadata (the service
// would default to Atom, which it no longer serves: nemo is lenient
// there, see docs/azure.md).
func (rq *request) negotiate(q url.Values) *apiError {
	if f := q.Get("$format"); f != "" {
		l, err := tablecodec.ParseMetadataLevel(f)
		if err != nil {
			return errFormat.because(err)
		}
		rq.level = l
		return nil
	}
	rq.level, rq.notJSON = acceptLevel(rq.r.Header.Get("Accept"))
	return nil
}

// acceptLevel reads an Accept header: the metadata level of its first
// JSON media range, else minimal metadata, with notJSON set when the header
// names media ranges and none of them admits JSON.
func acceptLevel(accept string) (l tablecodec.MetadataLevel, notJSON bool) {
	if l, err := tablecodec.ParseMetadataLevel(accept); err == nil {
		return l, false // the common case: one JSON media range
	}
	if strings.TrimSpace(accept) == "" {
		return tablecodec.MinimalMetadata, false
	}
	notJSON = true
	for _, r := range strings.Split(accept, ",") {
		if l, err := tablecodec.ParseMetadataLevel(strings.TrimSpace(r)); err == nil {
			return l, false
		}
		mt, _, _ := strings.Cut(r, ";")
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case "*/*", "application/*":
			notJSON = false
		}
	}
	return tablecodec.MinimalMetadata, notJSON
}

// body reads the request body up to the size limit.
func (rq *request) body() ([]byte, *apiError) {
	if rq.r.ContentLength > rq.f.opts.MaxRequestBytes {
		return nil, errBodyTooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(rq.w, rq.r.Body, rq.f.opts.MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errBodyTooLarge.because(err)
		}
		return nil, errInvalidInput.because(err)
	}
	return b, nil
}

// preferContent reports whether the client wants the entity back (Prefer:
// return-content, the default for inserts) and marks the preference applied
// when it named one.
func preferContent(r *http.Request, h http.Header, dflt bool) bool {
	p := strings.ToLower(r.Header.Get("Prefer"))
	switch {
	case strings.Contains(p, "return-no-content"):
		h.Set("Preference-Applied", "return-no-content")
		return false
	case strings.Contains(p, "return-content"):
		h.Set("Preference-Applied", "return-content")
		return true
	}
	return dflt
}

// now returns a fresh write time: 100 ns ticks, strictly increasing, so
// every write gets a distinct ETag even within one tick.
func (f *Frontend) now() time.Time {
	for {
		last := f.clock.Load()
		t := tablecodec.Ticks(time.Now())
		if t <= last {
			t = last + 1
		}
		if f.clock.CompareAndSwap(last, t) {
			return tablecodec.FromTicks(t)
		}
	}
}

// etagOf is the ETag the service derives from a write time:
// W/"datetime'2026-12-02T08%3A09%3A46.2133931Z'".
func etagOf(t time.Time) string {
	s := t.UTC().Format("2006-01-02T15:04:05.0000000Z")
	return `W/"datetime'` + strings.ReplaceAll(s, ":", "%3A") + `'"`
}

// serve routes one request.
func (f *Frontend) serve(c echo.Context) error {
	rq := f.newRequest(c)
	rawPath, rawQuery, _ := strings.Cut(rq.r.RequestURI, "?")
	if strings.HasPrefix(rawPath, "/") {
		// The usual origin form: nothing more to parse.
	} else if u, err := url.ParseRequestURI(rq.r.RequestURI); err == nil && u.IsAbs() {
		rawPath, rawQuery = u.EscapedPath(), u.RawQuery
	}
	q, qerr := parseQuery(rawQuery)
	sas, e := f.authenticate(rq.r, rawPath, q)
	if e != nil {
		rq.fail(e)
		return nil
	}
	if qerr != nil {
		rq.fail(errInvalidQueryParam.because(qerr))
		return nil
	}
	rq.sas = sas
	if e := rq.negotiate(q); e != nil {
		rq.fail(e)
		return nil
	}
	cancel, e := rq.timeoutParam(q)
	if e != nil {
		rq.fail(e)
		return nil
	}
	if cancel != nil {
		defer cancel()
	}
	rest := strings.TrimPrefix(rawPath, "/"+f.opts.Account)
	if e := f.route(rq, rest, q); e != nil {
		rq.fail(e)
	}
	return nil
}

// parseQuery parses a request's query string. A semicolon is an ordinary
// character there, as the service takes it ($format=application/json;
// odata=nometadata sent unescaped), not a separator: url.ParseQuery
// refuses it.
func parseQuery(raw string) (url.Values, error) {
	if strings.IndexByte(raw, ';') >= 0 {
		raw = strings.ReplaceAll(raw, ";", "%3B")
	}
	return url.ParseQuery(raw)
}

// OperationTimeout is the service's own bound on a table operation: the
// most its timeout parameter may ask, and nemo's request deadline when
// listen.request_timeout is 0 (proxy.Mount.ServiceTimeout).
const OperationTimeout = 30 * time.Second

// timeoutParam applies the timeout query parameter: the seconds the
// service may spend on the request, at most 30 (OperationTimeout; a larger
// value is taken as 30). The request's
// context gets that deadline when it is shorter than the one it has, so
// an operation that outlives it answers 500 OperationTimedOut as the
// service does; so does the deadline a commit sent to the store runs to
// (internal/deadline). A value that is not a whole number of seconds is
// refused (400 InvalidQueryParameterValue); 0 sets no bound.
func (rq *request) timeoutParam(q url.Values) (context.CancelFunc, *apiError) {
	s, ok := q["timeout"]
	if !ok {
		return nil, nil
	}
	n, err := strconv.Atoi(s[0])
	if err != nil || n < 0 {
		return nil, errInvalidQueryParam.because(fmt.Errorf("timeout %q: not a whole number of seconds", s[0]))
	}
	if n == 0 {
		return nil, nil
	}
	ctx, cancel := deadline.Bound(rq.r.Context(), time.Duration(min(n, int(OperationTimeout/time.Second)))*time.Second)
	rq.r = rq.r.WithContext(ctx)
	rq.c.SetRequest(rq.r)
	return cancel, nil
}

// preflight answers a CORS preflight request (OPTIONS) as the service does
// when no CORS rule matches: nemo keeps none (see serviceProperties).
func preflight(h http.Header) *apiError {
	if h.Get("Origin") == "" || h.Get("Access-Control-Request-Method") == "" {
		return errPreflightHeaders
	}
	return errPreflightFailed
}

func (f *Frontend) route(rq *request, rest string, q url.Values) *apiError {
	rq.r.Method = tunnelled(rq.r) // authenticated (signed) as sent
	m := rq.r.Method
	if m == http.MethodOptions {
		return preflight(rq.r.Header)
	}
	var res resource
	if rest != "" && rest != "/" {
		var err error
		if res, err = parseResource(rest); err != nil {
			return errInvalidURI.because(err)
		}
	}
	obs.SetOp(rq.r.Context(), opName(m, res, q, rq.r.Header))
	if act := actionOf(m, res, q, rq.r.Header); act != 0 {
		if e := rq.sas.authorize(act, res.table); e != nil {
			return e
		}
	}
	if rq.notJSON && answersPayload(m, res, q) {
		return errFormat
	}
	switch res.kind {
	case 0:
		return f.serviceProperties(rq, q)
	case resBatch:
		if m != http.MethodPost {
			return errVerb
		}
		return f.batch(rq)
	case resTables:
		switch m {
		case http.MethodGet:
			return f.queryTables(rq, q)
		case http.MethodPost:
			return f.createTable(rq)
		}
		return errVerb
	case resTable:
		switch m {
		case http.MethodDelete:
			return f.deleteTable(rq, res.table)
		case http.MethodGet:
			return f.getTable(rq, res.table)
		}
		return errVerb
	case resEntitySet:
		if q.Has("comp") {
			return f.tableACL(rq, res.table, q)
		}
		switch m {
		case http.MethodGet:
			return f.queryEntities(rq, res.table, q)
		case http.MethodPost:
			return f.insertEntity(rq, res.table)
		}
		return errVerb
	}
	switch m {
	case http.MethodGet:
		return f.getEntity(rq, res.table, res.pk, res.rk, q)
	case http.MethodPut, http.MethodPatch, "MERGE":
		return f.updateEntity(rq, res.table, res.pk, res.rk)
	case http.MethodDelete:
		return f.deleteEntity(rq, res.table, res.pk, res.rk)
	}
	return errVerb
}

// answersPayload reports whether the operation answers an OData payload
// whose format the Accept header chooses: Query Tables, Create Table,
// Query Entities (a point query too) and Insert Entity. The table ACL and
// service properties are XML documents whatever Accept says; updates and
// deletes answer no payload.
func answersPayload(method string, res resource, q url.Values) bool {
	switch res.kind {
	case resTables:
		return method == http.MethodGet || method == http.MethodPost
	case resTable, resEntity:
		return method == http.MethodGet
	case resEntitySet:
		return !q.Has("comp") && (method == http.MethodGet || method == http.MethodPost)
	}
	return false
}

// tunnelled is the verb r asks for: a POST naming another in X-HTTP-Method
// (MERGE, PATCH, PUT or DELETE; OData's tunnelling, for proxies that pass
// only GET and POST; the older .NET Table SDKs send their merges so) asks
// for that one, as Azure and Azurite take it; else r's own.
func tunnelled(r *http.Request) string {
	if r.Method == http.MethodPost {
		switch t := strings.ToUpper(strings.TrimSpace(r.Header.Get("X-HTTP-Method"))); t {
		case "MERGE", http.MethodPatch, http.MethodPut, http.MethodDelete:
			return t
		}
	}
	return r.Method
}

// actionOf names the operation a request asks for, in the terms of the
// SAS rules (res is the zero resource for the service itself). It is 0
// for a request no operation serves: its handler refuses it. A $batch is
// authorized operation by operation (batchOps).
func actionOf(method string, res resource, q url.Values, h http.Header) action {
	switch res.kind {
	case 0:
		return serviceAction(method, q)
	case resTables:
		switch method {
		case http.MethodGet:
			return actQueryTables
		case http.MethodPost:
			return actCreateTable
		}
	case resTable:
		switch method {
		case http.MethodGet:
			return actQueryTables
		case http.MethodDelete:
			return actDeleteTable
		}
	case resEntitySet:
		return entitySetAction(method, q)
	case resEntity:
		switch method {
		case http.MethodGet:
			return actQueryEntities
		case http.MethodDelete:
			return actDeleteEntity
		case http.MethodPut, http.MethodPatch, "MERGE":
			return writeAction(strings.TrimSpace(h.Get("If-Match")) != "")
		}
	}
	return 0
}

// serviceAction is actionOf for the service itself (restype=service).
func serviceAction(method string, q url.Values) action {
	switch {
	case q.Get("restype") != "service":
	case q.Get("comp") == "properties" && method == http.MethodGet:
		return actGetServiceProperties
	case q.Get("comp") == "properties" && method == http.MethodPut:
		return actSetServiceProperties
	case q.Get("comp") == "stats" && method == http.MethodGet:
		return actGetServiceStats
	}
	return 0
}

// entitySetAction is actionOf for a table's entity set: its ACL, a query,
// an insert.
func entitySetAction(method string, q url.Values) action {
	switch {
	case q.Get("comp") == "acl" && method == http.MethodGet:
		return actGetTableACL
	case q.Get("comp") == "acl" && method == http.MethodPut:
		return actSetTableACL
	case q.Has("comp"):
	case method == http.MethodGet:
		return actQueryEntities
	case method == http.MethodPost:
		return actInsertEntity
	}
	return 0
}

// ops are the values of the op label opName gives, besides "other".
var ops = []string{"get", "query", "insert", "update", "insert_or_replace", "merge", "insert_or_merge",
	"delete", "batch", "create_table", "delete_table", "query_tables", "table_acl", "service"}

// Ops are the values of the op label (nemo_requests_total, request spans)
// that this frontend's requests carry, besides "other" for a request no
// operation serves; docs/metrics.md lists each with the service's
// operation it names.
func Ops() []string { return slices.Clone(ops) }

// opName is the operation's label in nemo's request metrics and spans (one
// of ops, snake_case like every op label); "other" for a request no
// operation serves.
func opName(method string, res resource, q url.Values, h http.Header) string {
	conditional := strings.TrimSpace(h.Get("If-Match")) != ""
	switch res.kind {
	case 0:
		return "service"
	case resBatch:
		return "batch"
	case resTables, resTable:
		switch method {
		case http.MethodGet:
			return "query_tables"
		case http.MethodPost:
			return "create_table"
		case http.MethodDelete:
			return "delete_table"
		}
	case resEntitySet:
		switch {
		case q.Has("comp"):
			return "table_acl"
		case method == http.MethodGet:
			return "query"
		case method == http.MethodPost:
			return "insert"
		}
	case resEntity:
		switch {
		case method == http.MethodGet:
			return "get"
		case method == http.MethodDelete:
			return "delete"
		case method == http.MethodPut && conditional:
			return "update"
		case method == http.MethodPut:
			return "insert_or_replace"
		case (method == http.MethodPatch || method == "MERGE") && conditional:
			return "merge"
		case method == http.MethodPatch || method == "MERGE":
			return "insert_or_merge"
		}
	}
	return "other"
}

// writeAction is the action of an update: with If-Match it updates (or
// merges into) an existing entity, without it is an upsert.
func writeAction(conditional bool) action {
	if conditional {
		return actUpdateEntity
	}
	return actUpsertEntity
}

type resKind uint8

const (
	resTables    resKind = iota + 1 // /Tables
	resTable                        // /Tables('name')
	resEntitySet                    // /name or /name()
	resEntity                       // /name(PartitionKey='p',RowKey='r')
	resBatch                        // /$batch
)

type resource struct {
	kind   resKind
	table  string
	pk, rk string
}

// parseResource parses the path below the account: rest begins with "/"
// and is still percent-encoded.
func parseResource(rest string) (resource, error) {
	p, err := url.PathUnescape(strings.TrimPrefix(rest, "/"))
	if err != nil {
		return resource{}, err
	}
	if p == "$batch" {
		return resource{kind: resBatch}, nil
	}
	name, args, hasArgs := strings.Cut(p, "(")
	if hasArgs {
		var ok bool
		if args, ok = strings.CutSuffix(args, ")"); !ok {
			return resource{}, fmt.Errorf("unbalanced parenthesis in %q", p)
		}
	}
	if name == "" || strings.ContainsAny(name, "/'") {
		return resource{}, fmt.Errorf("no resource in %q", p)
	}
	if strings.EqualFold(name, "Tables") {
		if !hasArgs || args == "" {
			return resource{kind: resTables}, nil
		}
		t, tail, err := quoted(args)
		if err != nil || tail != "" {
			return resource{}, fmt.Errorf("table name in %q", p)
		}
		return resource{kind: resTable, table: t}, nil
	}
	if !hasArgs || args == "" {
		return resource{kind: resEntitySet, table: name}, nil
	}
	r := resource{kind: resEntity, table: name}
	var seenPK, seenRK bool
	for args != "" {
		k, v, ok := strings.Cut(args, "=")
		if !ok {
			return resource{}, fmt.Errorf("key predicate %q", args)
		}
		val, tail, err := quoted(v)
		if err != nil {
			return resource{}, err
		}
		switch strings.TrimSpace(k) {
		case "PartitionKey":
			r.pk, seenPK = val, true
		case "RowKey":
			r.rk, seenRK = val, true
		default:
			return resource{}, fmt.Errorf("unknown key %q", k)
		}
		if args, ok = strings.CutPrefix(tail, ","); !ok && tail != "" {
			return resource{}, fmt.Errorf("key predicate trailer %q", tail)
		}
	}
	if !seenPK || !seenRK {
		return resource{}, fmt.Errorf("key predicate needs PartitionKey and RowKey: %q", p)
	}
	return r, nil
}

// quoted reads an OData string literal (quoted, a doubled quote inside) at the
// start of s and returns it and what follows. A lone quote that is not
// followed by the end or a comma is taken literally: the Go SDK writes
// the keys of $batch operations into the URL without doubling quotes, and
// the service accepts that.
func quoted(s string) (string, string, error) {
	if !strings.HasPrefix(s, "'") {
		return "", "", fmt.Errorf("want a quoted string at %q", s)
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != '\'' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\'' {
			b.WriteByte('\'')
			i++
			continue
		}
		if tail := s[i+1:]; tail == "" || tail[0] == ',' {
			return b.String(), tail, nil
		}
		b.WriteByte('\'')
	}
	return "", "", fmt.Errorf("unterminated string in %q", s)
}
