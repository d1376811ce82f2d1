package datastore

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"sort"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/txn"
)

// Queries are answered over a covering key range (the whole partition, an
// ancestor's subtree, or __key__ bounds) read through the engine's
// serializable range scan, so every committed write, dirty or not, is seen
// and a transaction's query is protected against phantoms. Kinds, property
// filters, orders, projections, distinct-on, offsets, limits and cursors are
// evaluated here with Datastore's value order and array semantics.
const (
	scanPage = 1000 // records per engine scan call, at most
	maxBatch = 1000 // results per response batch; the client continues with the cursor
)

type order struct {
	prop string
	desc bool
}

// plan is a validated query.
type plan struct {
	p        dscodec.Partition
	ks       adapters.Keyspace
	kind     string // "" for a kindless query
	filter   *datastorepb.Filter
	start    []byte
	end      []byte // nil: unbounded
	orders   []order
	dnf      [][]*datastorepb.PropertyFilter // the filter's disjuncts (one empty one without a filter)
	keyDesc  bool                            // the implicit final order on the key is descending
	meta     string                          // a metadata query's kind (__kind__, __property__, __namespace__)
	proj     []string
	keysOnly bool
	distinct []string
	offset   int
	limit    int // -1: none
	startPos *position
	endPos   *position
	rawStart []byte
}

func isInequality(op datastorepb.PropertyFilter_Operator) bool {
	switch op {
	case datastorepb.PropertyFilter_LESS_THAN, datastorepb.PropertyFilter_LESS_THAN_OR_EQUAL,
		datastorepb.PropertyFilter_GREATER_THAN, datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL,
		datastorepb.PropertyFilter_NOT_EQUAL, datastorepb.PropertyFilter_NOT_IN:
		return true
	}
	return false
}

// queryPartition resolves a query's partition, as the service checks it.
func queryPartition(project, database string, pid *datastorepb.PartitionId) (dscodec.Partition, error) {
	if (pid.GetProjectId() != "" && pid.GetProjectId() != project) || (pid.GetDatabaseId() != "" && pid.GetDatabaseId() != database) {
		other := dscodec.Partition{Project: cmp.Or(pid.GetProjectId(), project), Database: cmp.Or(pid.GetDatabaseId(), database)}
		return dscodec.Partition{}, invalid("mismatched databases within request: %s vs. %s",
			legacyDatabase(dscodec.Partition{Project: project, Database: database}), legacyDatabase(other))
	}
	if err := checkNamespace(pid.GetNamespaceId(), false); err != nil {
		return dscodec.Partition{}, err
	}
	return dscodec.Partition{Project: project, Database: database, Namespace: pid.GetNamespaceId()}, nil
}

func (f *Frontend) planQuery(project, database string, pid *datastorepb.PartitionId, q *datastorepb.Query) (*plan, error) {
	p, err := queryPartition(project, database, pid)
	if err != nil {
		return nil, err
	}
	if q.GetFindNearest() != nil {
		// Vector search: the emulators ignore it (the Firestore emulator
		// answers the query as if it had none); answering so here would
		// give a client who asked for the nearest entities all of them.
		return nil, status.Error(codes.Unimplemented, "nemo does not support vector search (find_nearest)")
	}
	pl := &plan{p: p, ks: f.keyspace(p), limit: -1}
	if pl.kind, pl.filter, err = checkQuery(p, q); err != nil {
		return nil, err
	}
	if meta := metadataKind(pl.kind); meta != "" {
		if err := checkMetadataQuery(pl.p, meta, q, pl.filter); err != nil {
			return nil, err
		}
		pl.meta = meta
	}
	pl.coverRange()
	pl.dnf = [][]*datastorepb.PropertyFilter{nil}
	if pl.filter != nil {
		pl.dnf = disjuncts(pl.filter)
	}
	for _, pr := range q.GetProjection() {
		if name := pr.GetProperty().GetName(); name != keyProperty && !slices.Contains(pl.proj, name) {
			pl.proj = append(pl.proj, name)
		}
	}
	pl.keysOnly = len(q.GetProjection()) > 0 && len(pl.proj) == 0
	for _, d := range q.GetDistinctOn() {
		pl.distinct = append(pl.distinct, d.GetName())
	}
	pl.order(q.GetOrder())
	pl.offset = int(q.GetOffset())
	if q.GetLimit() != nil {
		pl.limit = int(q.GetLimit().GetValue())
	}
	if c := q.GetStartCursor(); len(c) > 0 {
		if pl.startPos, err = decodeCursor(c, len(pl.orders), len(pl.proj)); err != nil {
			return nil, err
		}
		pl.rawStart = c
		if pl.keyOrdered() && len(pl.proj) == 0 && len(pl.distinct) == 0 {
			pl.raiseStart(adapters.Successor(pl.startPos.key))
		}
	}
	if c := q.GetEndCursor(); len(c) > 0 {
		if pl.endPos, err = decodeCursor(c, len(pl.orders), len(pl.proj)); err != nil {
			return nil, err
		}
	}
	return pl, nil
}

// order sets the query's total order as Firestore in Datastore mode orders
// results: the explicit orders, then, in the direction of the last explicit
// one (ascending without any), the distinct-on properties, the inequality
// properties in name order (those of OR branches too: an entity without a
// value for one of them is not a result), the projected properties in name
// order, and the key. The legacy Datastore emulator breaks ties on
// ascending keys whatever the orders, and orders a projection with a
// descending order by its projected values ascending; nemo follows
// Firestore, which runs production Datastore now (a descending order ends
// in descending keys). Without explicit orders the two agree: inequality
// properties, then projected ones in name order, then the key, ascending.
func (pl *plan) order(explicit []*datastorepb.PropertyOrder) {
	last := false
	for _, o := range explicit {
		last = o.GetDirection() == datastorepb.PropertyOrder_DESCENDING
		pl.orders = append(pl.orders, order{prop: o.GetProperty().GetName(), desc: last})
	}
	add := func(names []string) {
		for _, name := range names {
			if !slices.ContainsFunc(pl.orders, func(o order) bool { return o.prop == name }) {
				pl.orders = append(pl.orders, order{prop: name, desc: last})
			}
		}
	}
	add(pl.distinct)
	add(inequalityProperties(pl.filter))
	add(slices.Sorted(slices.Values(pl.proj)))
	if !slices.ContainsFunc(pl.orders, func(o order) bool { return o.prop == keyProperty }) {
		pl.keyDesc = last
	}
}

// inequalityProperties lists, in name order, the properties that have an
// inequality filter anywhere in f.
func inequalityProperties(f *datastorepb.Filter) []string {
	var out []string
	if f == nil {
		return nil
	}
	walkFilters(f, func(f *datastorepb.Filter) {
		if pf := f.GetPropertyFilter(); pf != nil && isInequality(pf.GetOp()) && !slices.Contains(out, pf.GetProperty().GetName()) {
			out = append(out, pf.GetProperty().GetName())
		}
	})
	slices.Sort(out)
	return out
}

// keyOrdered reports whether results come in key order, so the scan can
// stop as soon as it has enough.
func (pl *plan) keyOrdered() bool {
	return len(pl.orders) == 0 || (len(pl.orders) == 1 && pl.orders[0].prop == keyProperty && !pl.orders[0].desc)
}

func (pl *plan) raiseStart(k []byte) {
	if bytes.Compare(k, pl.start) > 0 {
		pl.start = k
	}
}

func (pl *plan) lowerEnd(k []byte) {
	if pl.end == nil || bytes.Compare(k, pl.end) < 0 {
		pl.end = k
	}
}

// conjuncts lists the property filters that must all hold: the filter
// itself or the members of (nested) AND composites.
func conjuncts(f *datastorepb.Filter) []*datastorepb.PropertyFilter {
	if pf := f.GetPropertyFilter(); pf != nil {
		return []*datastorepb.PropertyFilter{pf}
	}
	cf := f.GetCompositeFilter()
	if cf == nil || cf.GetOp() != datastorepb.CompositeFilter_AND {
		return nil
	}
	var out []*datastorepb.PropertyFilter
	for _, sub := range cf.GetFilters() {
		out = append(out, conjuncts(sub)...)
	}
	return out
}

// coverRange narrows [start, end) with the conjunctive key filters.
func (pl *plan) coverRange() {
	if pl.filter == nil {
		return
	}
	for _, pf := range conjuncts(pl.filter) {
		if pf.GetProperty().GetName() != keyProperty {
			continue
		}
		k, err := dscodec.EncodeKey(pf.GetValue().GetKeyValue())
		if err != nil {
			continue
		}
		switch pf.GetOp() {
		case datastorepb.PropertyFilter_HAS_ANCESTOR:
			pl.raiseStart(k)
			pl.lowerEnd(dscodec.SubtreeEnd(k))
		case datastorepb.PropertyFilter_EQUAL:
			pl.raiseStart(k)
			pl.lowerEnd(adapters.Successor(k))
		case datastorepb.PropertyFilter_GREATER_THAN:
			pl.raiseStart(adapters.Successor(k))
		case datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL:
			pl.raiseStart(k)
		case datastorepb.PropertyFilter_LESS_THAN:
			pl.lowerEnd(k)
		case datastorepb.PropertyFilter_LESS_THAN_OR_EQUAL:
			pl.lowerEnd(adapters.Successor(k))
		}
	}
}

// --- evaluation ---

// holds reports whether value v satisfies pf on its own.
func holds(pf *datastorepb.PropertyFilter, v *datastorepb.Value) bool {
	switch pf.GetOp() {
	case datastorepb.PropertyFilter_IN:
		for _, x := range pf.GetValue().GetArrayValue().GetValues() {
			if compareValues(v, x) == 0 {
				return true
			}
		}
		return false
	case datastorepb.PropertyFilter_NOT_IN:
		for _, x := range pf.GetValue().GetArrayValue().GetValues() {
			if compareValues(v, x) == 0 {
				return false
			}
		}
		return true
	}
	c := compareValues(v, pf.GetValue())
	switch pf.GetOp() {
	case datastorepb.PropertyFilter_EQUAL:
		return c == 0
	case datastorepb.PropertyFilter_NOT_EQUAL:
		return c != 0
	case datastorepb.PropertyFilter_LESS_THAN:
		return c < 0
	case datastorepb.PropertyFilter_LESS_THAN_OR_EQUAL:
		return c <= 0
	case datastorepb.PropertyFilter_GREATER_THAN:
		return c > 0
	case datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL:
		return c >= 0
	}
	return false
}

// holdsAll reports whether one value satisfies every filter in pfs.
func holdsAll(pfs []*datastorepb.PropertyFilter, v *datastorepb.Value) bool {
	for _, pf := range pfs {
		if !holds(pf, v) {
			return false
		}
	}
	return true
}

// someValue reports whether one indexed value of the property satisfies
// every filter in pfs (all on that property). Datastore's array semantics:
// a filter matches an entity when some value of the property matches, and
// inequalities on one property must be met by one and the same value (they
// are one range over the index), while equalities may each be met by a
// different value.
func someValue(e *datastorepb.Entity, pfs []*datastorepb.PropertyFilter) bool {
	name := pfs[0].GetProperty().GetName()
	if pfs[0].GetOp() == datastorepb.PropertyFilter_HAS_ANCESTOR {
		anc, _ := dscodec.EncodeKey(pfs[0].GetValue().GetKeyValue())
		k, _ := dscodec.EncodeKey(e.GetKey())
		return bytes.HasPrefix(k, anc)
	}
	for _, v := range indexValues(e, name) {
		if holdsAll(pfs, v) {
			return true
		}
	}
	return false
}

// matchesAll reports whether an entity meets every filter of a conjunction
// on its own property's values. The inequalities on one property are one
// range over its index, so one and the same value must meet them all, and
// an equality (or IN) on a property that also has inequalities must be met
// by a value inside that range; equalities on a property without
// inequalities may each be met by a different value. That is how the
// Firestore emulator in Datastore mode (production's engine) evaluates
// arrays; the legacy Datastore emulator lets an equality and the range be
// met by different values (v = 1 AND v > 3 matches [1, 5] there, not in
// Firestore).
func matchesAll(conj []*datastorepb.PropertyFilter, e *datastorepb.Entity) bool {
	ineq := map[string][]*datastorepb.PropertyFilter{}
	for _, pf := range conj {
		if isInequality(pf.GetOp()) {
			ineq[pf.GetProperty().GetName()] = append(ineq[pf.GetProperty().GetName()], pf)
		}
	}
	for _, pf := range conj {
		if isInequality(pf.GetOp()) {
			continue
		}
		if !someValue(e, append([]*datastorepb.PropertyFilter{pf}, ineq[pf.GetProperty().GetName()]...)) {
			return false
		}
	}
	for _, pfs := range ineq {
		if !someValue(e, pfs) {
			return false
		}
	}
	return true
}

// disjuncts is f in disjunctive normal form: a list of conjunctions of
// property filters (an IN stays one filter). Its size is bounded by the
// disjunction limit checkQuery enforces.
func disjuncts(f *datastorepb.Filter) [][]*datastorepb.PropertyFilter {
	if pf := f.GetPropertyFilter(); pf != nil {
		return [][]*datastorepb.PropertyFilter{{pf}}
	}
	cf := f.GetCompositeFilter()
	if cf.GetOp() == datastorepb.CompositeFilter_OR {
		var out [][]*datastorepb.PropertyFilter
		for _, sub := range cf.GetFilters() {
			out = append(out, disjuncts(sub)...)
		}
		return out
	}
	out := [][]*datastorepb.PropertyFilter{nil}
	for _, sub := range cf.GetFilters() {
		var next [][]*datastorepb.PropertyFilter
		for _, left := range out {
			for _, right := range disjuncts(sub) {
				next = append(next, append(slices.Clip(left), right...))
			}
		}
		out = next
	}
	return out
}

// matching lists the disjuncts of the query's filter that e meets (none:
// e is not a result).
func (pl *plan) matching(e *datastorepb.Entity) [][]*datastorepb.PropertyFilter {
	var out [][]*datastorepb.PropertyFilter
	for _, conj := range pl.dnf {
		if matchesAll(conj, e) {
			out = append(out, conj)
		}
	}
	return out
}

// candidates are the values of a property that can place an entity in the
// order: the index rows some disjunct it meets reads. A disjunct with
// inequalities on the property reads the values in their range; one with
// an equality (or IN) on it reads the matched value, not the array's other
// elements (ties then fall to the key); one that does not filter the
// property reads every value.
func candidates(e *datastorepb.Entity, name string, conjs [][]*datastorepb.PropertyFilter) []*datastorepb.Value {
	vals := indexValues(e, name)
	if len(conjs) == 1 && !filters(conjs[0], name) {
		return vals
	}
	var out []*datastorepb.Value
	for _, v := range vals {
		for _, conj := range conjs {
			if readsValue(conj, name, v) {
				out = append(out, v)
				break
			}
		}
	}
	return out
}

func filters(conj []*datastorepb.PropertyFilter, name string) bool {
	return slices.ContainsFunc(conj, func(pf *datastorepb.PropertyFilter) bool { return pf.GetProperty().GetName() == name })
}

// readsValue reports whether a disjunct reads value v of property name:
// v meets its inequalities on the property and its first equality there.
func readsValue(conj []*datastorepb.PropertyFilter, name string, v *datastorepb.Value) bool {
	eqSeen := false
	for _, pf := range conj {
		if pf.GetProperty().GetName() != name || pf.GetOp() == datastorepb.PropertyFilter_HAS_ANCESTOR {
			continue
		}
		if !isInequality(pf.GetOp()) {
			if eqSeen {
				continue
			}
			eqSeen = true
		}
		if !holds(pf, v) {
			return false
		}
	}
	return true
}

// distinctValues drops repeated values (an index holds each value once).
func distinctValues(vals []*datastorepb.Value) []*datastorepb.Value {
	var out []*datastorepb.Value
	for _, v := range vals {
		if !slices.ContainsFunc(out, func(x *datastorepb.Value) bool { return compareValues(x, v) == 0 }) {
			out = append(out, v)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return compareValues(out[i], out[j]) < 0 })
	return out
}

type row struct {
	res *datastorepb.EntityResult
	pos position
}

// rows turns a matching entity into its result rows: one, or for a
// projection one per combination of the projected properties' values.
// An entity without a value for an ordered or projected property has no
// index entry and yields no rows.
func (pl *plan) rows(res *datastorepb.EntityResult, key []byte, conjs [][]*datastorepb.PropertyFilter) []row {
	e := res.Entity
	combos := [][]*datastorepb.Value{nil}
	for _, name := range pl.proj {
		vals := distinctValues(candidates(e, name, conjs))
		if len(vals) == 0 {
			return nil
		}
		var next [][]*datastorepb.Value
		for _, c := range combos {
			for _, v := range vals {
				next = append(next, append(slices.Clone(c), v))
			}
		}
		combos = next
	}
	out := make([]row, 0, len(combos))
	for _, c := range combos {
		r := row{res: res, pos: position{key: key, proj: c}}
		for _, o := range pl.orders {
			var v *datastorepb.Value
			if i := slices.Index(pl.proj, o.prop); i >= 0 {
				v = c[i]
			} else {
				vals := candidates(e, o.prop, conjs)
				if len(vals) == 0 {
					return nil
				}
				v = vals[0]
				for _, x := range vals[1:] {
					if d := compareValues(x, v); (d < 0 && !o.desc) || (d > 0 && o.desc) {
						v = x
					}
				}
			}
			r.pos.sort = append(r.pos.sort, v)
		}
		out = append(out, r)
	}
	return out
}

// compare orders two positions in the query's total order: the orders,
// then the key (descending when the last explicit order is), then the
// projected values.
func (pl *plan) compare(a, b *position) int {
	for i, o := range pl.orders {
		c := compareValues(a.sort[i], b.sort[i])
		if o.desc {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	if c := bytes.Compare(a.key, b.key); c != 0 {
		if pl.keyDesc {
			return -c
		}
		return c
	}
	for i := range a.proj {
		if c := compareValues(a.proj[i], b.proj[i]); c != 0 {
			return c
		}
	}
	return 0
}

func (pl *plan) wantKind(e *datastorepb.Entity) bool {
	path := e.GetKey().GetPath()
	if len(path) == 0 {
		return false
	}
	kind := path[len(path)-1].GetKind()
	if pl.kind == "" {
		return !reserved.MatchString(kind)
	}
	return kind == pl.kind
}

// result is a query's rows before paging.
type result struct {
	rows     []row
	complete bool // false: the scan stopped early with rows left
	cutByEnd bool // the end cursor excluded rows
}

// collect scans the covering range and returns the query's rows in order,
// at most need of them when need > 0 and the order allows stopping early.
// Stopping early, it reads in pages sized to what is still needed, so a
// miss fetches about that many records from the store (see pageSize).
func (pl *plan) collect(ctx context.Context, scan scanFunc, need int) (*result, error) {
	out := &result{complete: true}
	stream := pl.keyOrdered() && len(pl.distinct) == 0
	start := pl.start
	page := 0
	for {
		if stream && need > 0 {
			page = pageSize(page, need-len(out.rows))
		} else {
			page = scanPage
		}
		recs, next, err := scan(ctx, pl.ks, start, pl.end, page)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			res, err := dscodec.DecodeValue(rec.Value)
			if err != nil {
				return nil, err
			}
			if !pl.wantKind(res.Entity) {
				continue
			}
			conjs := pl.matching(res.Entity)
			if len(conjs) == 0 {
				continue
			}
			rs := pl.rows(res, rec.Key, conjs)
			if stream {
				sort.SliceStable(rs, func(i, j int) bool { return pl.compare(&rs[i].pos, &rs[j].pos) < 0 })
			}
			for _, r := range rs {
				if len(pl.distinct) > 0 {
					out.rows = append(out.rows, r) // cursors apply after dedupe
					continue
				}
				if !pl.withinCursors(r, out) {
					continue
				}
				if stream && need > 0 && len(out.rows) == need {
					out.complete = false
					return out, nil
				}
				out.rows = append(out.rows, r)
			}
		}
		if next == nil {
			break
		}
		if stream && need > 0 && len(out.rows) == need {
			out.complete = false // what follows can only be beyond need
			return out, nil
		}
		start = next
	}
	if !stream {
		sort.SliceStable(out.rows, func(i, j int) bool { return pl.compare(&out.rows[i].pos, &out.rows[j].pos) < 0 })
	}
	if len(pl.distinct) > 0 {
		// A cursor is a place in the de-duplicated results: a value first
		// seen before a start cursor is not a result after it.
		out.rows = slices.DeleteFunc(pl.dedupe(out.rows), func(r row) bool { return !pl.withinCursors(r, out) })
	}
	return out, nil
}

// pageSize is the next scan's limit for a query that still needs left
// rows, the last scan having asked for last records (0: none yet). A page
// that yields fewer rows than records (kinds, filters or cursors rejected
// some) says the rest of the range is as sparse: the page doubles, up to
// scanPage, rather than creeping on in small reads; the first page asks
// for exactly what is needed.
func pageSize(last, left int) int {
	return min(max(left, 2*last), scanPage)
}

// withinCursors reports whether r lies after the start cursor and at or
// before the end cursor, noting in out when the end cursor cut a row.
func (pl *plan) withinCursors(r row, out *result) bool {
	if pl.startPos != nil && pl.compare(&r.pos, pl.startPos) <= 0 {
		return false
	}
	if pl.endPos != nil && pl.compare(&r.pos, pl.endPos) > 0 {
		out.cutByEnd = true
		return false
	}
	return true
}

// dedupe keeps the first row of each distinct-on combination.
func (pl *plan) dedupe(rows []row) []row {
	seen := map[string]bool{}
	var out []row
	for _, r := range rows {
		var key []byte
		for _, d := range pl.distinct {
			var v *datastorepb.Value
			if i := slices.Index(pl.proj, d); i >= 0 {
				v = r.pos.proj[i]
			} else if i := slices.IndexFunc(pl.orders, func(o order) bool { return o.prop == d }); i >= 0 {
				v = r.pos.sort[i]
			} else if vals := distinctValues(indexValues(r.res.Entity, d)); len(vals) > 0 {
				v = vals[0]
			} else {
				v = &datastorepb.Value{ValueType: &datastorepb.Value_NullValue{}}
			}
			key = append(key, canonical(v)...)
			key = append(key, 0)
		}
		if !seen[string(key)] {
			seen[string(key)] = true
			out = append(out, r)
		}
	}
	return out
}

// canonical encodes a value's identity in the index (its class and
// content) for dedupe.
func canonical(v *datastorepb.Value) []byte {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(indexForm(v))
	return b
}

// entityFor renders one result row in the query's result type.
func (pl *plan) entityFor(r row, pm readMask) *datastorepb.EntityResult {
	key := r.res.Entity.GetKey()
	out := &datastorepb.EntityResult{Version: r.res.Version, CreateTime: r.res.CreateTime, UpdateTime: r.res.UpdateTime, Cursor: encodeCursor(&r.pos)}
	switch {
	case pl.keysOnly:
		out.Entity = &datastorepb.Entity{Key: key}
	case len(pl.proj) > 0:
		props := map[string]*datastorepb.Value{}
		for i, name := range pl.proj {
			v := indexForm(r.pos.proj[i])
			v.Meaning = 18 // index value, as the service marks projected values
			props[name] = v
		}
		out.Entity = &datastorepb.Entity{Key: key, Properties: props}
	default:
		e := proto.Clone(r.res.Entity).(*datastorepb.Entity)
		pm.apply(e)
		out.Entity = e
	}
	return out
}

func (pl *plan) resultType() datastorepb.EntityResult_ResultType {
	switch {
	case pl.keysOnly:
		return datastorepb.EntityResult_KEY_ONLY
	case len(pl.proj) > 0:
		return datastorepb.EntityResult_PROJECTION
	}
	return datastorepb.EntityResult_FULL
}

// run executes the plan in t and pages the rows into one batch.
func (pl *plan) run(ctx context.Context, scan scanFunc, pm readMask, readVersion int64) (*datastorepb.QueryResultBatch, error) {
	page := maxBatch
	if pl.limit >= 0 {
		page = min(page, pl.limit)
	}
	res, err := pl.collect(ctx, scan, pl.offset+page+1)
	if err != nil {
		return nil, err
	}
	rows := res.rows
	b := &datastorepb.QueryResultBatch{EntityResultType: pl.resultType(), SnapshotVersion: readVersion}
	skipped := min(pl.offset, len(rows))
	b.SkippedResults = int32(skipped)
	if skipped > 0 {
		b.SkippedCursor = encodeCursor(&rows[skipped-1].pos)
	}
	rows = rows[skipped:]
	n := min(len(rows), page)
	for _, r := range rows[:n] {
		b.EntityResults = append(b.EntityResults, pl.entityFor(r, pm))
	}
	switch {
	case n > 0:
		b.EndCursor = b.EntityResults[n-1].Cursor
	case skipped > 0:
		b.EndCursor = b.SkippedCursor
	default:
		b.EndCursor = pl.rawStart
	}
	switch {
	case pl.limit >= 0 && n == pl.limit:
		b.MoreResults = datastorepb.QueryResultBatch_MORE_RESULTS_AFTER_LIMIT
	case n < len(rows) || !res.complete:
		b.MoreResults = datastorepb.QueryResultBatch_NOT_FINISHED
	case res.cutByEnd:
		b.MoreResults = datastorepb.QueryResultBatch_MORE_RESULTS_AFTER_CURSOR
	default:
		b.MoreResults = datastorepb.QueryResultBatch_NO_MORE_RESULTS
	}
	return b, nil
}

// scanFunc reads [start, end) in pages (txn.Txn.Scan, txn.Engine.Scan).
type scanFunc func(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, []byte, error)

// scanner reads in the request's transaction (S locks on the whole range:
// no phantoms until it ends) or, for a non-transactional query, the latest
// commits without locks (txn.ReadLatest), so a plain query never fails on
// a lock a transaction holds. It sees every committed write; a commit
// landing between two pages of a long scan may be seen in part, as
// Datastore's non-transactional queries are not snapshots either.
func (f *Frontend) scanner(s *session) scanFunc {
	if s != nil {
		return s.t.Scan
	}
	return func(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, []byte, error) {
		return f.engine.Scan(ctx, ks, start, end, limit, txn.ReadLatest)
	}
}

// RunQuery implements datastorepb.DatastoreServer.
func (f *Frontend) RunQuery(ctx context.Context, req *datastorepb.RunQueryRequest) (*datastorepb.RunQueryResponse, error) {
	if err := f.checkProject(req.GetProjectId()); err != nil {
		return nil, err
	}
	if req.GetExplainOptions() != nil {
		return nil, status.Error(codes.Unimplemented, "nemo does not explain queries")
	}
	q, err := queryOf(req)
	if err != nil {
		return nil, err
	}
	if q == nil {
		return nil, invalid("A query is required.")
	}
	pl, err := f.planQuery(req.GetProjectId(), req.GetDatabaseId(), req.GetPartitionId(), q)
	if err != nil {
		return nil, err
	}
	pm, err := newReadMask(req.GetPropertyMask())
	if err != nil {
		return nil, err
	}
	if pm != nil && len(pl.proj) > 0 {
		return nil, invalid("property masks are not allowed on projection queries")
	}
	s, newID, done, err := f.openRead(req.GetReadOptions())
	if err != nil {
		return nil, err
	}
	defer done()
	scan, err := f.planScanner(ctx, pl, s)
	if err != nil {
		return nil, err
	}
	batch, err := pl.run(ctx, scan, pm, f.readVersion())
	if err != nil {
		return nil, toStatus(err)
	}
	batch.ReadTime = readTime(s)
	return &datastorepb.RunQueryResponse{Batch: batch, Query: q, Transaction: newID}, nil
}

// planScanner is what a plan reads: the engine (f.scanner), or for a
// metadata query the entities it lists, from the backend (passMetadata)
// or computed from the engine.
func (f *Frontend) planScanner(ctx context.Context, pl *plan, s *session) (scanFunc, error) {
	if pl.meta == "" {
		return f.scanner(s), nil
	}
	pass, err := f.passMetadata(pl, s)
	if err != nil {
		return nil, toStatus(err)
	}
	if pass {
		ents, err := f.opts.Metadata.MetadataEntities(ctx, pl.ks, pl.meta)
		if err != nil {
			return nil, storeStatus(err)
		}
		return entityScanner(ents)
	}
	return f.metadataScanner(ctx, pl, f.scanner(s))
}
