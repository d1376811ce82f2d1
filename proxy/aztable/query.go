package aztable

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/url"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/proxy/aztable/odata"
	"github.com/nemocache/nemo/txn"
)

// maxExamined bounds the entities one query page evaluates a non-key
// predicate on. A page that reaches it ends early with a continuation,
// as the service's own pages do when a query runs long.
const maxExamined = 50_000

// Continuation tokens are the base64 of the next PartitionKey and RowKey,
// Azurite's spelling (Azure's own are opaque too; clients only echo them).
func encodeToken(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func decodeToken(s string) (string, bool) {
	b, err := base64.StdEncoding.DecodeString(s)
	return string(b), err == nil
}

// nextKey is where the next page starts: the key of the first entity not
// returned, or, after an early stop, the successor of the last examined.
type nextKey struct {
	pk, rk string
	set    bool
}

func (f *Frontend) queryEntities(rq *request, table string, q url.Values) *apiError {
	expr, err := odata.Parse(q.Get("$filter"))
	if err != nil {
		return errBadQuery.because(err)
	}
	sel, err := odata.ParseSelect(q.Get("$select"))
	if err != nil {
		return errInvalidInput.because(err)
	}
	top, e := parseTop(q)
	if e != nil {
		return e
	}
	if top == 0 {
		top = pageSize
	}
	ks, e := f.keyspaceOf(rq, table)
	if e != nil {
		return e
	}
	rng, exact := odata.KeyRange(expr)
	rng = within(rng, rq.sas)
	start := rng.Start
	if npk := q.Get("NextPartitionKey"); npk != "" {
		pk, ok1 := decodeToken(npk)
		rk, ok2 := decodeToken(q.Get("NextRowKey"))
		if !ok1 || !ok2 {
			return errInvalidQueryParam
		}
		if k := tablecodec.EncodeKey(pk, rk); bytes.Compare(k, start) > 0 {
			start = k
		}
	}
	ctx := rq.r.Context()
	var out [][]byte
	var next nextKey
	if !rng.Empty() && (rng.End == nil || bytes.Compare(start, rng.End) < 0) {
		// Outside a transaction: each page read sees the latest commits
		// without locks (txn.ReadLatest), as the service's queries do.
		out, next, err = f.scanEntities(ctx, ks, start, rng.End, top, exact, expr)
		if err != nil {
			return engineError(err)
		}
	}
	h := rq.w.Header()
	if next.set {
		h.Set("X-Ms-Continuation-Nextpartitionkey", encodeToken(next.pk))
		h.Set("X-Ms-Continuation-Nextrowkey", encodeToken(next.rk))
	}
	body := []byte{'{'}
	meta := rq.entityMeta(table, false)
	if rq.level != tablecodec.NoMetadata {
		body = appendMember(body, "odata.metadata", meta.BaseURL+"$metadata#"+table)
		body = append(body, ',')
	}
	body = append(body, `"value":[`...)
	for i, v := range out {
		if i > 0 {
			body = append(body, ',')
		}
		if body, err = tablecodec.AppendValueJSON(body, v, meta, sel); err != nil {
			return errInternal.because(err)
		}
	}
	rq.reply(http.StatusOK, append(body, "]}"...))
	return nil
}

// within narrows a query's key range to the range a table SAS confines
// the request to: the service answers only entities inside it.
func within(r odata.Range, sas *sasToken) odata.Range {
	lo, hi := sas.keyRange()
	if lo != nil && bytes.Compare(lo, r.Start) > 0 {
		r.Start = lo
	}
	if hi != nil && (r.End == nil || bytes.Compare(hi, r.End) < 0) {
		r.End = hi
	}
	return r
}

// scanEntities reads the entities of one result page from start: at most
// top that match expr (every one in range when exact), as their stored
// values, and where the next page starts. Only a query that is not exact
// decodes entities, to evaluate expr on them.
func (f *Frontend) scanEntities(ctx context.Context, ks adapters.Keyspace, start, end []byte, top int, exact bool, expr odata.Expr) ([][]byte, nextKey, error) {
	var out [][]byte
	pos, examined := start, 0
	for {
		limit := top + 1 - len(out) // one more than fits tells whether a next page exists
		if !exact {
			limit = pageSize
		}
		recs, more, err := f.eng.Scan(ctx, ks, pos, end, limit, txn.ReadLatest)
		if err != nil {
			return nil, nextKey{}, err
		}
		for _, r := range recs {
			examined++
			if !exact {
				ent, err := tablecodec.DecodeEntity(r.Value)
				if err != nil {
					return nil, nextKey{}, errInternal.because(err)
				}
				if !expr.Eval(ent) {
					continue
				}
			}
			if len(out) == top {
				pk, rk, err := tablecodec.DecodeKey(r.Key)
				if err != nil {
					return nil, nextKey{}, errInternal.because(err)
				}
				return out, nextKey{pk: pk, rk: rk, set: true}, nil
			}
			out = append(out, r.Value)
		}
		if more == nil {
			return out, nextKey{}, nil
		}
		if examined >= maxExamined && len(recs) > 0 {
			pk, rk, err := tablecodec.DecodeKey(recs[len(recs)-1].Key)
			if err != nil {
				return nil, nextKey{}, errInternal.because(err)
			}
			return out, nextKey{pk: pk, rk: rk + "\x00", set: true}, nil
		}
		pos = more
	}
}
