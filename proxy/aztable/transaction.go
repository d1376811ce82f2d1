package aztable

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/proxy/aztable/batch"
	"github.com/nemocache/nemo/txn"
)

// MaxBatchOps is the service's limit on the operations of one changeset.
const MaxBatchOps = 100

// opFailure is an operation of a changeset that failed, and why.
type opFailure struct {
	index int
	err   *apiError
}

func (o *opFailure) Error() string { return fmt.Sprintf("operation %d: %v", o.index, o.err) }

// batch runs a $batch changeset as one engine transaction: every operation
// applies or none does, and a failure names the failing operation's index
// in its message ("3:The specified entity already exists."), as the
// service does.
func (f *Frontend) batch(rq *request) *apiError {
	body, e := rq.body()
	if e != nil {
		return e
	}
	req, err := batch.Parse(rq.r.Header.Get("Content-Type"), body, MaxBatchOps)
	var tooMany *batch.TooManyError
	switch {
	case errors.As(err, &tooMany):
		// Parse stopped at the limit, so the boundaries are known only if
		// the body is otherwise sound; answer in the multipart shape when
		// possible, as the service does.
		return f.batchFailure(rq, nil, &opFailure{index: tooMany.Index, err: errTooManyOps})
	case err != nil:
		return errInvalidInput.because(err)
	}
	if req.Retrieve {
		return f.batchRetrieve(rq, req)
	}
	table, ops, fail := f.batchOps(req, rq.sas)
	if fail != nil {
		return f.batchFailure(rq, req, fail)
	}
	ctx := rq.r.Context()
	stored := make([]*tablecodec.Entity, len(ops))
	var last *txn.Txn
	err = f.eng.Run(ctx, false, func(t *txn.Txn) error {
		last = t
		ks, err := f.lockTable(rq, t, table)
		if err != nil {
			if errors.Is(err, txn.ErrConflict) {
				return err
			}
			return &opFailure{index: 0, err: engineError(err)}
		}
		for i, op := range ops {
			if stored[i], err = f.apply(ctx, t, ks, op); err != nil {
				if errors.Is(err, txn.ErrConflict) {
					return err // retry the whole transaction
				}
				return &opFailure{index: i, err: engineError(err)}
			}
		}
		return nil
	})
	var of *opFailure
	switch {
	case errors.As(err, &of):
		return f.batchFailure(rq, req, of)
	case err != nil:
		return engineError(err)
	}
	if err := f.asStored(last, stored); err != nil {
		return errInternal.because(err)
	}
	results := make([]batch.Result, len(ops))
	for i, op := range ops {
		h := opHeader(req.Ops[i])
		res := batch.Result{Status: http.StatusNoContent, Header: h}
		if s := stored[i]; s != nil {
			h.Set("ETag", s.ETag)
			if op.kind == opInsert {
				link := rq.entityLink(table, s.PartitionKey, s.RowKey)
				h.Set("Location", link)
				if op.content {
					level := opLevel(req.Ops[i], rq.level)
					meta := rq.entityMeta(table, true)
					meta.Level = level
					h.Set("Preference-Applied", "return-content")
					h.Set("Content-Type", contentType(level))
					res.Status = http.StatusCreated
					res.Body = tablecodec.AppendJSON(nil, s, meta, nil)
				} else {
					h.Set("Preference-Applied", "return-no-content")
					h.Set("DataServiceId", link)
				}
			}
		}
		results[i] = res
	}
	f.writeBatch(rq, req, results)
	return nil
}

// batchRetrieve answers a batch holding one query operation: a point
// query (GET of one entity), answered as the batch's only part as the
// service answers it. A failure (a query of a whole table, which nemo does
// not answer there, a permission the request's SAS lacks, a missing
// entity) is that part's error, as a changeset's failing operation is; the
// batch itself is 202.
func (f *Frontend) batchRetrieve(rq *request, req *batch.Request) *apiError {
	op := req.Ops[0]
	level := opLevel(op, rq.level)
	h := opHeader(op)
	r := batch.Result{Status: http.StatusOK, Header: h}
	etag, body, e := f.retrieve(rq, op, level)
	if e != nil {
		if e.cause != nil {
			f.log.Debug("aztable: batch query failed", "code", e.code, "err", e.cause)
		}
		r.Status = e.status
		h.Set("Content-Type", "application/json;odata=minimalmetadata;charset=utf-8")
		r.Body = errorBody(e.code, e.msg, rq.id, time.Now())
	} else {
		h["ETag"] = []string{etag}
		h.Set("Content-Type", contentType(level))
		r.Body = body
	}
	b, _ := req.Boundaries()
	rq.w.Header().Set("Content-Type", batch.ContentType(b))
	rq.w.WriteHeader(http.StatusAccepted)
	_, _ = rq.w.Write(batch.AppendRetrieveResponse(nil, b, r))
	return nil
}

// opHeader is the headers every answer to a batch operation op carries,
// with op's Content-ID echoed as the service spells it.
func opHeader(op batch.Operation) http.Header {
	h := http.Header{"X-Content-Type-Options": {"nosniff"}, "Cache-Control": {"no-cache"}, "DataServiceVersion": {"3.0;"}}
	if id := op.Header.Get("Content-ID"); id != "" {
		h["Content-ID"] = []string{id}
	}
	return h
}

// opResource is the resource a batch operation op addresses.
func (f *Frontend) opResource(op batch.Operation) (resource, *apiError) {
	path := op.URL.EscapedPath()
	rest, ok := strings.CutPrefix(path, "/"+f.opts.Account)
	if !ok {
		return resource{}, errInvalidURI.because(fmt.Errorf("operation path %q is not under /%s", path, f.opts.Account))
	}
	res, err := parseResource(rest)
	if err != nil {
		return resource{}, errInvalidURI.because(err)
	}
	return res, nil
}

// retrieve reads the entity a batch's query operation op addresses: its
// ETag and its JSON at level.
func (f *Frontend) retrieve(rq *request, op batch.Operation, level tablecodec.MetadataLevel) (string, []byte, *apiError) {
	res, e := f.opResource(op)
	if e != nil {
		return "", nil, e
	}
	if res.kind != resEntity {
		return "", nil, errInvalidInput.because(fmt.Errorf("GET %s in a batch: nemo answers a point query there only", op.URL.EscapedPath()))
	}
	if e := rq.sas.authorize(actQueryEntities, res.table); e != nil {
		return "", nil, e
	}
	q, err := parseQuery(op.URL.RawQuery)
	if err != nil {
		return "", nil, errInvalidQueryParam.because(err)
	}
	return f.readEntity(rq, res.table, res.pk, res.rk, q.Get("$select"), level)
}

// opLevel is the metadata level an operation of a changeset asks for: its
// own $format, else its own Accept header, as for a request of its own
// (the SDKs send both with each operation); dflt, the $batch request's
// level, when it names neither or names something else.
func opLevel(op batch.Operation, dflt tablecodec.MetadataLevel) tablecodec.MetadataLevel {
	q, _ := parseQuery(op.URL.RawQuery)
	if f := q.Get("$format"); f != "" {
		if l, err := tablecodec.ParseMetadataLevel(f); err == nil {
			return l
		}
		return dflt
	}
	if a := op.Header.Get("Accept"); a != "" {
		if l, notJSON := acceptLevel(a); !notJSON {
			return l
		}
	}
	return dflt
}

// batchOps resolves and checks every operation: one table, one partition,
// each entity at most once, and each one granted by the request's shared
// access signature, if it carries one (action, table and key range).
func (f *Frontend) batchOps(req *batch.Request, sas *sasToken) (string, []*writeOp, *opFailure) {
	var table, pk string
	seen := map[string]bool{}
	ops := make([]*writeOp, 0, len(req.Ops))
	for i, bo := range req.Ops {
		fail := func(e *apiError) (string, []*writeOp, *opFailure) { return "", nil, &opFailure{index: i, err: e} }
		res, e := f.opResource(bo)
		if e != nil {
			return fail(e)
		}
		var op *writeOp
		if bo.Method != http.MethodDelete {
			if e := needContentType(bo.Header); e != nil {
				return fail(e)
			}
		}
		switch {
		case res.kind == resEntitySet && bo.Method == http.MethodPost:
			ent, err := tablecodec.ParseNewEntity(bo.Body)
			if err != nil {
				return fail(codecError(err))
			}
			p := strings.ToLower(bo.Header.Get("Prefer"))
			op = &writeOp{kind: opInsert, pk: ent.PartitionKey, rk: ent.RowKey, ent: ent, content: !strings.Contains(p, "return-no-content")}
		case res.kind == resEntity:
			var body []byte
			if bo.Method != http.MethodDelete {
				body = bo.Body
			}
			if op, e = writeOpOf(bo.Method, bo.Header, res.pk, res.rk, body); e != nil {
				return fail(e)
			}
		default:
			return fail(errInvalidInput.because(fmt.Errorf("%s %s is not an entity write", bo.Method, bo.URL.EscapedPath())))
		}
		if e := sas.authorize(op.action(), res.table); e != nil {
			return fail(e)
		}
		if e := sas.checkRange(op.pk, op.rk); e != nil {
			return fail(e)
		}
		if i == 0 {
			table, pk = res.table, op.pk
		} else if !strings.EqualFold(res.table, table) {
			return fail(errInvalidInput.because(fmt.Errorf("operations on tables %q and %q", table, res.table)))
		} else if op.pk != pk {
			return fail(errOtherPartition)
		}
		if seen[op.rk] {
			return fail(errDuplicateRow)
		}
		seen[op.rk] = true
		ops = append(ops, op)
	}
	return table, ops, nil
}

// batchFailure answers a failed changeset: 202 with the failing operation's
// error as the changeset's only response. Without parsed boundaries (req
// nil) new ones are made up.
func (f *Frontend) batchFailure(rq *request, req *batch.Request, of *opFailure) *apiError {
	if req == nil {
		id := newRequestID()
		req = &batch.Request{Boundary: "batch_" + id, Changeset: "changeset_" + id}
	}
	e := of.err
	if e.cause != nil {
		f.log.Debug("aztable: batch operation failed", "index", of.index, "code", e.code, "err", e.cause)
	}
	id := strconv.Itoa(of.index + 1)
	if req.Ops != nil && of.index < len(req.Ops) {
		if own := req.Ops[of.index].Header.Get("Content-ID"); own != "" {
			id = own // the failing operation's own, as for a success
		}
	}
	h := http.Header{
		"Content-ID":         {id},
		"DataServiceVersion": {"3.0;"},
		"Content-Type":       {"application/json;odata=minimalmetadata;charset=utf-8"},
	}
	body := errorBody(e.code, strconv.Itoa(of.index)+":"+e.msg, rq.id, time.Now())
	f.writeBatch(rq, req, []batch.Result{{Status: e.status, Header: h, Body: body}})
	return nil
}

func (f *Frontend) writeBatch(rq *request, req *batch.Request, results []batch.Result) {
	b, cs := req.Boundaries()
	rq.w.Header().Set("Content-Type", batch.ContentType(b))
	rq.w.WriteHeader(http.StatusAccepted)
	_, _ = rq.w.Write(batch.AppendResponse(nil, b, cs, results))
}
