package datastore

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nemocache/nemo/internal/obs"
)

// The v1 REST JSON API: POST /v1/projects/{project}:{method} with the
// request message as protojson, answered with the response message as
// protojson, and errors in Google's JSON error shape. It runs the same
// handlers as gRPC.

// restMethod binds one REST method to its request type and gRPC handler.
type restMethod struct {
	newReq func() proto.Message
	call   func(f *Frontend, ctx context.Context, req proto.Message, project string) (proto.Message, error)
}

var restMethods = map[string]restMethod{
	"lookup": {func() proto.Message { return &datastorepb.LookupRequest{} },
		func(f *Frontend, ctx context.Context, m proto.Message, p string) (proto.Message, error) {
			r := m.(*datastorepb.LookupRequest)
			r.ProjectId = p
			return f.lookup(ctx, r, false)
		}},
	"runQuery": {func() proto.Message { return &datastorepb.RunQueryRequest{} },
		func(f *Frontend, ctx context.Context, m proto.Message, p string) (proto.Message, error) {
			r := m.(*datastorepb.RunQueryRequest)
			r.ProjectId = p
			return f.RunQuery(ctx, r)
		}},
	"runAggregationQuery": {func() proto.Message { return &datastorepb.RunAggregationQueryRequest{} },
		func(f *Frontend, ctx context.Context, m proto.Message, p string) (proto.Message, error) {
			r := m.(*datastorepb.RunAggregationQueryRequest)
			r.ProjectId = p
			return f.RunAggregationQuery(ctx, r)
		}},
	"beginTransaction": {func() proto.Message { return &datastorepb.BeginTransactionRequest{} },
		func(f *Frontend, ctx context.Context, m proto.Message, p string) (proto.Message, error) {
			r := m.(*datastorepb.BeginTransactionRequest)
			r.ProjectId = p
			return f.BeginTransaction(ctx, r)
		}},
	"commit": {func() proto.Message { return &datastorepb.CommitRequest{} },
		func(f *Frontend, ctx context.Context, m proto.Message, p string) (proto.Message, error) {
			r := m.(*datastorepb.CommitRequest)
			r.ProjectId = p
			return f.Commit(ctx, r)
		}},
	"rollback": {func() proto.Message { return &datastorepb.RollbackRequest{} },
		func(f *Frontend, ctx context.Context, m proto.Message, p string) (proto.Message, error) {
			r := m.(*datastorepb.RollbackRequest)
			r.ProjectId = p
			return f.Rollback(ctx, r)
		}},
	"allocateIds": {func() proto.Message { return &datastorepb.AllocateIdsRequest{} },
		func(f *Frontend, ctx context.Context, m proto.Message, p string) (proto.Message, error) {
			r := m.(*datastorepb.AllocateIdsRequest)
			r.ProjectId = p
			return f.AllocateIds(ctx, r)
		}},
	"reserveIds": {func() proto.Message { return &datastorepb.ReserveIdsRequest{} },
		func(f *Frontend, ctx context.Context, m proto.Message, p string) (proto.Message, error) {
			r := m.(*datastorepb.ReserveIdsRequest)
			r.ProjectId = p
			return f.ReserveIds(ctx, r)
		}},
}

// restOps are the REST methods' op labels ("runQuery" is "run_query"),
// the labels the gRPC interceptor gives the same methods (obs.MethodOp).
var restOps = func() map[string]string {
	ops := make(map[string]string, len(restMethods))
	for m := range restMethods {
		ops[m] = obs.MethodOp(m)
	}
	return ops
}()

// Ops are the values of the op label (nemo_requests_total, request spans)
// that this frontend's requests carry, gRPC and REST alike, sorted;
// docs/metrics.md lists each with the service's method it names.
func Ops() []string {
	return slices.Sorted(maps.Values(restOps))
}

// parseRESTPath splits /v1/projects/{project}:{method}.
func parseRESTPath(path string) (project, method string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/v1/projects/")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 || strings.Contains(rest[:i], "/") {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// decodeREST parses a REST request body for method. An empty body is an
// empty request.
func decodeREST(method string, body []byte) (proto.Message, error) {
	m, ok := restMethods[method]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unknown method %q", method)
	}
	req := m.newReq()
	if len(strings.TrimSpace(string(body))) == 0 {
		return req, nil
	}
	if err := protojson.Unmarshal(body, req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "Invalid JSON payload received. %v", err)
	}
	return req, nil
}

func (f *Frontend) restHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" && r.Method == http.MethodGet {
			_, _ = io.WriteString(w, "Ok\n") // the emulator's health check
			return
		}
		if !f.authenticateREST(w, r) {
			return
		}
		project, method, ok := parseRESTPath(r.URL.Path)
		if _, known := restMethods[method]; ok && known {
			obs.SetOp(r.Context(), restOps[method]) // the request metrics' label, as gRPC's
		}
		if !ok {
			writeRESTError(w, status.Errorf(codes.NotFound, "no such resource: %s", r.URL.Path))
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeRESTError(w, status.Errorf(codes.InvalidArgument, "%s %s: use POST", r.Method, r.URL.Path))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(f.opts.MaxRequestBytes)))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeRESTError(w, status.Errorf(codes.InvalidArgument, "request larger than %d bytes", f.opts.MaxRequestBytes))
				return
			}
			writeRESTError(w, status.Errorf(codes.InvalidArgument, "reading the request: %v", err))
			return
		}
		req, err := decodeREST(method, body)
		if err != nil {
			writeRESTError(w, err)
			return
		}
		resp, err := restMethods[method].call(f, r.Context(), req, project)
		if err != nil {
			writeRESTError(w, toStatus(err))
			return
		}
		opts := protojson.MarshalOptions{UseEnumNumbers: strings.Contains(r.URL.Query().Get("$alt"), "enum-encoding=int")}
		out, err := opts.Marshal(resp)
		if err != nil {
			writeRESTError(w, status.Errorf(codes.Internal, "encoding the response: %v", err))
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		_, _ = w.Write(out)
	})
}

// httpStatus is Google's mapping of canonical codes to HTTP statuses.
var httpStatus = map[codes.Code]int{
	codes.OK: 200, codes.Canceled: 499, codes.Unknown: 500, codes.InvalidArgument: 400,
	codes.DeadlineExceeded: 504, codes.NotFound: 404, codes.AlreadyExists: 409, codes.PermissionDenied: 403,
	codes.ResourceExhausted: 429, codes.FailedPrecondition: 400, codes.Aborted: 409, codes.OutOfRange: 400,
	codes.Unimplemented: 501, codes.Internal: 500, codes.Unavailable: 503, codes.DataLoss: 500,
	codes.Unauthenticated: 401,
}

// writeRESTError writes {"error": {"code", "message", "status"}}.
func writeRESTError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	code := httpStatus[st.Code()]
	if code == 0 {
		code = 500
	}
	body := map[string]any{"error": map[string]any{
		"code": code, "message": st.Message(), "status": strings.ToUpper(codeName(st.Code())),
	}}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	if d, ok := retryDelay(err); ok {
		w.Header().Set("Retry-After", strconv.Itoa(max(int(d.Round(time.Second)/time.Second), 1)))
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// codeName spells a code as Google's JSON does (ALREADY_EXISTS).
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	if c == codes.Canceled {
		return "CANCELLED"
	}
	return b.String()
}
