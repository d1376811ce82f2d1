package aztable

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/proxy/aztable/odata"
	"github.com/nemocache/nemo/txn"
)

type opKind uint8

const (
	opInsert  opKind = iota + 1 // POST
	opReplace                   // PUT: update, or insert-or-replace without If-Match
	opMerge                     // MERGE / PATCH: merge, or insert-or-merge without If-Match
	opDelete                    // DELETE
)

// writeOp is one entity write, from a plain request or a $batch part.
type writeOp struct {
	kind    opKind
	pk, rk  string
	ifMatch string             // "", "*" or an ETag
	ent     *tablecodec.Entity // the payload's properties (nil for a delete)
	content bool               // the client wants the entity back (inserts)
}

// apply performs op in t and returns the entity as stored (nil after a
// delete). Every write stamps a fresh Timestamp and the ETag derived from
// it.
func (f *Frontend) apply(ctx context.Context, t *txn.Txn, ks adapters.Keyspace, op *writeOp) (*tablecodec.Entity, error) {
	key := tablecodec.EncodeKey(op.pk, op.rk)
	if op.kind == opInsert {
		e := f.stamp(op.pk, op.rk, op.ent.Props)
		if err := t.Insert(ctx, ks, key, tablecodec.EncodeEntity(e)); err != nil {
			if errors.Is(err, txn.ErrExists) {
				return nil, errEntityExists
			}
			return nil, err
		}
		return e, nil
	}
	if op.kind == opReplace && op.ifMatch == "" {
		// Insert-or-replace does not depend on the entity's state: a
		// blind upsert, with no read and no condition.
		e := f.stamp(op.pk, op.rk, op.ent.Props)
		return e, t.Upsert(ctx, ks, key, tablecodec.EncodeEntity(e))
	}
	cur, exists, err := t.GetForUpdate(ctx, ks, key)
	if err != nil {
		return nil, err
	}
	var old *tablecodec.Entity
	if exists {
		if old, err = tablecodec.DecodeEntity(cur); err != nil {
			return nil, err
		}
	}
	if op.ifMatch != "" {
		if !exists {
			return nil, errResourceNotFound
		}
		if op.ifMatch != "*" && op.ifMatch != old.ETag {
			return nil, errCondition
		}
	}
	if op.kind == opDelete {
		if !exists {
			return nil, errResourceNotFound
		}
		_, err := t.Delete(ctx, ks, key)
		return nil, err
	}
	props := op.ent.Props
	if op.kind == opMerge && exists {
		props = merge(old.Props, props)
	}
	e := f.stamp(op.pk, op.rk, props)
	if err := e.Validate(); err != nil { // a merge can outgrow the limits
		return nil, codecError(err)
	}
	return e, t.Upsert(ctx, ks, key, tablecodec.EncodeEntity(e))
}

func (f *Frontend) stamp(pk, rk string, props []tablecodec.Property) *tablecodec.Entity {
	now := f.now()
	return &tablecodec.Entity{PartitionKey: pk, RowKey: rk, Timestamp: now, ETag: etagOf(now), Props: props}
}

// merge overlays upd on old: same-named properties take the new value (and
// type), new ones are appended.
func merge(old, upd []tablecodec.Property) []tablecodec.Property {
	out := make([]tablecodec.Property, 0, len(old)+len(upd))
	out = append(out, old...)
outer:
	for _, p := range upd {
		for i := range out {
			if out[i].Name == p.Name {
				out[i] = p
				continue outer
			}
		}
		out = append(out, p)
	}
	return out
}

// action is the SAS action op performs.
func (op *writeOp) action() action {
	switch op.kind {
	case opInsert:
		return actInsertEntity
	case opDelete:
		return actDeleteEntity
	}
	return writeAction(op.ifMatch != "")
}

// entityMeta is how entities of table are decorated for rq.
func (rq *request) entityMeta(table string, single bool) tablecodec.Metadata {
	tls := rq.r.TLS != nil
	memo := rq.f.meta.Load()
	if memo == nil || memo.host != rq.r.Host || memo.tls != tls || memo.table != table {
		base := rq.baseURL()
		memo = &metaMemo{host: rq.r.Host, tls: tls, table: table, base: base, context: base + "$metadata#" + table + "/@Element"}
		rq.f.meta.Store(memo)
	}
	m := tablecodec.Metadata{Level: rq.level, BaseURL: memo.base, Account: rq.f.opts.Account, Table: table}
	if single {
		m.Context = memo.context
	}
	return m
}

// metaMemo is the last entityMeta's address strings: a client sends its
// requests to one host, mostly for one table.
type metaMemo struct {
	host, table   string
	tls           bool
	base, context string
}

// entityLink is the entity's address, as Location and DataServiceId give it.
func (rq *request) entityLink(table, pk, rk string) string {
	esc := func(k string) string { return url.PathEscape(strings.ReplaceAll(k, "'", "''")) }
	return rq.baseURL() + table + "(PartitionKey='" + esc(pk) + "',RowKey='" + esc(rk) + "')"
}

// runWrite runs op as its own transaction.
func (f *Frontend) runWrite(rq *request, table string, op *writeOp) (*tablecodec.Entity, *apiError) {
	ctx := rq.r.Context()
	stored := make([]*tablecodec.Entity, 1)
	var last *txn.Txn
	err := f.eng.Run(ctx, false, func(t *txn.Txn) error {
		last = t
		ks, err := f.lockTable(rq, t, table)
		if err != nil {
			return err
		}
		stored[0], err = f.apply(ctx, t, ks, op)
		return err
	})
	if err != nil {
		return nil, engineError(err)
	}
	if err := f.asStored(last, stored); err != nil {
		return nil, errInternal.because(err)
	}
	return stored[0], nil
}

// asStored replaces each written entity by the one the commit installed:
// writing through to Azure, that one carries the ETag and Timestamp the
// service gave the write (coherence mode shared), which the client must
// see. Writing back, the commit installed the entities as stamped here:
// nothing to do.
func (f *Frontend) asStored(t *txn.Txn, stored []*tablecodec.Entity) error {
	if !f.eng.WritesThrough() {
		return nil
	}
	byKey := map[string][]byte{}
	for _, c := range t.Committed() {
		if c.Op == txn.ChangePut {
			byKey[string(c.Key)] = c.Value
		}
	}
	for i, e := range stored {
		if e == nil {
			continue
		}
		v, ok := byKey[string(tablecodec.EncodeKey(e.PartitionKey, e.RowKey))]
		if !ok {
			continue
		}
		got, err := tablecodec.DecodeEntity(v)
		if err != nil {
			return err
		}
		stored[i] = got
	}
	return nil
}

// needContentType refuses a payload sent without a Content-Type header, as
// the service does ("Content-Type header value missing."): the header is
// required for every request carrying an OData payload.
func needContentType(h http.Header) *apiError {
	if strings.TrimSpace(h.Get("Content-Type")) == "" {
		return errNoContentType
	}
	return nil
}

func (f *Frontend) insertEntity(rq *request, table string) *apiError {
	if e := needContentType(rq.r.Header); e != nil {
		return e
	}
	body, e := rq.body()
	if e != nil {
		return e
	}
	ent, err := tablecodec.ParseNewEntity(body)
	if err != nil {
		return codecError(err)
	}
	if e := rq.sas.checkRange(ent.PartitionKey, ent.RowKey); e != nil {
		return e
	}
	op := &writeOp{kind: opInsert, pk: ent.PartitionKey, rk: ent.RowKey, ent: ent}
	stored, e := f.runWrite(rq, table, op)
	if e != nil {
		return e
	}
	h := rq.w.Header()
	h.Set("ETag", stored.ETag)
	link := rq.entityLink(table, stored.PartitionKey, stored.RowKey)
	h.Set("Location", link)
	if !preferContent(rq.r, h, true) {
		h.Set("DataServiceId", link)
		rq.w.WriteHeader(http.StatusNoContent)
		return nil
	}
	rq.reply(http.StatusCreated, tablecodec.AppendJSON(nil, stored, rq.entityMeta(table, true), nil))
	return nil
}

func (f *Frontend) getEntity(rq *request, table, pk, rk string, q url.Values) *apiError {
	etag, body, e := f.readEntity(rq, table, pk, rk, q.Get("$select"), rq.level)
	if e != nil {
		return e
	}
	rq.w.Header()["Etag"] = []string{etag}
	rq.reply(http.StatusOK, body)
	return nil
}

// readEntity is a point query: the entity's ETag and its JSON at level,
// projected by the $select value sel.
func (f *Frontend) readEntity(rq *request, table, pk, rk, sel string, level tablecodec.MetadataLevel) (string, []byte, *apiError) {
	props, err := odata.ParseSelect(sel)
	if err != nil {
		return "", nil, errInvalidInput.because(err)
	}
	if !rq.sas.inRange(pk, rk) {
		// A point query is a query, and a SAS confines queries to its
		// range: the entity is not found (the service answers 404 too).
		return "", nil, errResourceNotFound
	}
	ks, e := f.keyspaceOf(rq, table)
	if e != nil {
		return "", nil, e
	}
	v, ok, err := f.eng.Get(rq.r.Context(), ks, tablecodec.EncodeKey(pk, rk), txn.ReadLatest)
	if err != nil {
		return "", nil, engineError(err)
	}
	if !ok {
		return "", nil, errResourceNotFound
	}
	// The answer is written from the stored value itself: no Entity is
	// decoded for a read.
	etag, err := tablecodec.ValueETag(v)
	if err != nil {
		return "", nil, errInternal.because(err)
	}
	meta := rq.entityMeta(table, true)
	meta.Level = level
	k := bodyKey{table: table, pk: pk, rk: rk, context: meta.Context, level: level}
	var body []byte
	if len(props) == 0 { // a $select answer is not cached
		body = f.bodies.get(k, etag, v)
	}
	if body == nil {
		if body, err = tablecodec.AppendValueJSON(make([]byte, 0, 256+len(v)*5/4), v, meta, props); err != nil {
			return "", nil, errInternal.because(err)
		}
		if len(props) == 0 {
			f.bodies.put(k, etag, v, body)
		}
	}
	return etag, body, nil
}

// writeOpOf builds the update or delete named by method for an entity
// addressed by URL; body is nil for a delete.
func writeOpOf(method string, h http.Header, pk, rk string, body []byte) (*writeOp, *apiError) {
	for _, k := range [2]string{pk, rk} {
		if err := tablecodec.ValidateKey("key", k); err != nil {
			return nil, urlKeyError(err, k)
		}
	}
	op := &writeOp{pk: pk, rk: rk, ifMatch: strings.TrimSpace(h.Get("If-Match"))}
	if op.ifMatch != "" && op.ifMatch != "*" && !weakETag(op.ifMatch) {
		// The service takes * or a weak ETag; anything else is a bad
		// request, not a condition that fails.
		return nil, errInvalidInput.because(fmt.Errorf("If-Match %q is not a weak ETag", op.ifMatch))
	}
	switch method {
	case http.MethodDelete:
		if op.ifMatch == "" {
			return nil, errMissingHeader
		}
		op.kind = opDelete
		return op, nil
	case http.MethodPut:
		op.kind = opReplace
	case http.MethodPatch, "MERGE":
		op.kind = opMerge
	default:
		return nil, errVerb
	}
	ent, err := tablecodec.ParseJSONEntity(body)
	if err != nil {
		return nil, codecError(err)
	}
	op.ent = ent
	return op, nil
}

// weakETag reports whether s has a weak ETag's form, W/"..." (w/ too), its
// quotes inside escaped: what the service accepts in If-Match besides *.
func weakETag(s string) bool {
	if len(s) < 4 || (s[0] != 'W' && s[0] != 'w') || s[1] != '/' || s[2] != '"' || s[len(s)-1] != '"' {
		return false
	}
	inner := s[3 : len(s)-1]
	for i := 0; i < len(inner); i++ {
		if inner[i] == '"' && (i == 0 || inner[i-1] != '\\') {
			return false
		}
	}
	return true
}

func (f *Frontend) updateEntity(rq *request, table, pk, rk string) *apiError {
	if e := needContentType(rq.r.Header); e != nil {
		return e
	}
	body, e := rq.body()
	if e != nil {
		return e
	}
	op, e := writeOpOf(rq.r.Method, rq.r.Header, pk, rk, body)
	if e != nil {
		return e
	}
	if e := rq.sas.checkRange(pk, rk); e != nil {
		return e
	}
	stored, e := f.runWrite(rq, table, op)
	if e != nil {
		return e
	}
	rq.w.Header().Set("ETag", stored.ETag)
	rq.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (f *Frontend) deleteEntity(rq *request, table, pk, rk string) *apiError {
	op, e := writeOpOf(http.MethodDelete, rq.r.Header, pk, rk, nil)
	if e != nil {
		return e
	}
	if e := rq.sas.checkRange(pk, rk); e != nil {
		return e
	}
	if _, e := f.runWrite(rq, table, op); e != nil {
		return e
	}
	rq.w.WriteHeader(http.StatusNoContent)
	return nil
}
