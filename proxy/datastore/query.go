package datastore

import (
	"bytes"
	"context"
	"slices"
	"sort"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

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
	scanPage = 1000 // records per engine scan call
	maxBatch = 1000 // results per response batch; the client continues with the cursor
	maxIn    = 30   // values in an IN / NOT_IN filter
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
	ineq     map[string][]*datastorepb.PropertyFilter // top-level conjunctive inequalities per property
	eq       map[string]*datastorepb.PropertyFilter   // a top-level conjunctive equality per property
	ineqProp []string                                 // their properties, in filter order
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

// queryPartition resolves a query's partition.
func queryPartition(project, database string, pid *datastorepb.PartitionId) (dscodec.Partition, error) {
	if pid.GetProjectId() != "" && pid.GetProjectId() != project {
		return dscodec.Partition{}, invalid("mismatched projects: partition %q, request %q", pid.GetProjectId(), project)
	}
	if pid.GetDatabaseId() != "" && pid.GetDatabaseId() != database {
		return dscodec.Partition{}, invalid("mismatched databases: partition %q, request %q", pid.GetDatabaseId(), database)
	}
	return dscodec.Partition{Project: project, Database: database, Namespace: pid.GetNamespaceId()}, nil
}

func (f *Frontend) planQuery(project, database string, pid *datastorepb.PartitionId, q *datastorepb.Query) (*plan, error) {
	p, err := queryPartition(project, database, pid)
	if err != nil {
		return nil, err
	}
	pl := &plan{p: p, ks: f.keyspace(p), limit: -1, ineq: map[string][]*datastorepb.PropertyFilter{}}
	switch len(q.GetKind()) {
	case 0:
	case 1:
		pl.kind = q.GetKind()[0].GetName()
		if pl.kind == "" {
			return nil, invalid("The kind name must not be empty.")
		}
		if reserved.MatchString(pl.kind) {
			return nil, status.Errorf(codes.Unimplemented, "nemo does not serve metadata queries (kind %q)", pl.kind)
		}
	default:
		return nil, invalid("A query may have at most one kind.")
	}
	if q.GetFilter() != nil {
		if pl.filter, err = normFilter(p, q.GetFilter()); err != nil {
			return nil, err
		}
	}
	pl.coverRange()
	for _, o := range q.GetOrder() {
		name := o.GetProperty().GetName()
		if name == "" {
			return nil, invalid("An order must name a property.")
		}
		pl.orders = append(pl.orders, order{prop: name, desc: o.GetDirection() == datastorepb.PropertyOrder_DESCENDING})
	}
	for _, pr := range q.GetProjection() {
		name := pr.GetProperty().GetName()
		if name == "" {
			return nil, invalid("A projection must name a property.")
		}
		if name != keyProperty && !slices.Contains(pl.proj, name) {
			pl.proj = append(pl.proj, name)
		}
	}
	pl.keysOnly = len(q.GetProjection()) > 0 && len(pl.proj) == 0
	for _, d := range q.GetDistinctOn() {
		pl.distinct = append(pl.distinct, d.GetName())
	}
	if len(pl.orders) == 0 {
		// Without explicit orders results come in the order of the index
		// that serves the query: the inequality property, else the
		// projected properties, else the key.
		if len(pl.ineqProp) > 0 {
			pl.orders = []order{{prop: pl.ineqProp[0]}}
		}
	}
	// Projection rows tie-break on the projected values before the key:
	// they come from an index over the ordered, then the projected
	// properties.
	for _, name := range pl.proj {
		if !slices.ContainsFunc(pl.orders, func(o order) bool { return o.prop == name }) {
			pl.orders = append(pl.orders, order{prop: name})
		}
	}
	if pl.kind == "" {
		for _, o := range pl.orders {
			if o.prop != keyProperty || o.desc {
				return nil, invalid("kind is required for all orders except __key__ ascending")
			}
		}
	}
	if pl.filter != nil {
		for _, pf := range conjuncts(pl.filter) {
			if pf.GetOp() == datastorepb.PropertyFilter_EQUAL && slices.Contains(pl.proj, pf.GetProperty().GetName()) {
				return nil, invalid("cannot use projection on a property with an equality filter")
			}
		}
	}
	if q.GetOffset() < 0 {
		return nil, invalid("The offset must not be negative.")
	}
	pl.offset = int(q.GetOffset())
	if q.GetLimit() != nil {
		if q.GetLimit().GetValue() < 0 {
			return nil, invalid("The limit must not be negative.")
		}
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

// coverRange narrows [start, end) with the conjunctive key filters and
// records the conjunctive inequalities.
func (pl *plan) coverRange() {
	if pl.filter == nil {
		return
	}
	for _, pf := range conjuncts(pl.filter) {
		name := pf.GetProperty().GetName()
		if isInequality(pf.GetOp()) {
			if _, ok := pl.ineq[name]; !ok {
				pl.ineqProp = append(pl.ineqProp, name)
			}
			pl.ineq[name] = append(pl.ineq[name], pf)
		}
		if pf.GetOp() == datastorepb.PropertyFilter_EQUAL && name != keyProperty {
			if pl.eq == nil {
				pl.eq = map[string]*datastorepb.PropertyFilter{}
			}
			if _, ok := pl.eq[name]; !ok {
				pl.eq[name] = pf
			}
		}
		if name != keyProperty {
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

// normFilter validates a filter and returns a copy whose key values carry
// the query's partition (clients often leave it out).
func normFilter(p dscodec.Partition, f *datastorepb.Filter) (*datastorepb.Filter, error) {
	switch ft := f.GetFilterType().(type) {
	case *datastorepb.Filter_CompositeFilter:
		cf := ft.CompositeFilter
		if cf.GetOp() != datastorepb.CompositeFilter_AND && cf.GetOp() != datastorepb.CompositeFilter_OR {
			return nil, invalid("Unknown composite filter operator %v.", cf.GetOp())
		}
		if len(cf.GetFilters()) == 0 {
			return nil, invalid("A composite filter must have at least one sub-filter.")
		}
		out := &datastorepb.CompositeFilter{Op: cf.GetOp()}
		for _, sub := range cf.GetFilters() {
			n, err := normFilter(p, sub)
			if err != nil {
				return nil, err
			}
			out.Filters = append(out.Filters, n)
		}
		return &datastorepb.Filter{FilterType: &datastorepb.Filter_CompositeFilter{CompositeFilter: out}}, nil
	case *datastorepb.Filter_PropertyFilter:
		pf := proto.Clone(ft.PropertyFilter).(*datastorepb.PropertyFilter)
		name := pf.GetProperty().GetName()
		if name == "" {
			return nil, invalid("A property filter must name a property.")
		}
		if pf.GetValue() == nil {
			return nil, invalid("A property filter must have a value.")
		}
		switch pf.GetOp() {
		case datastorepb.PropertyFilter_EQUAL, datastorepb.PropertyFilter_NOT_EQUAL,
			datastorepb.PropertyFilter_LESS_THAN, datastorepb.PropertyFilter_LESS_THAN_OR_EQUAL,
			datastorepb.PropertyFilter_GREATER_THAN, datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL:
			if rank(pf.GetValue()) == rankUnindexed {
				return nil, invalid("The filter on %q compares with a value that cannot be indexed.", name)
			}
		case datastorepb.PropertyFilter_IN, datastorepb.PropertyFilter_NOT_IN:
			arr := pf.GetValue().GetArrayValue()
			if arr == nil {
				return nil, invalid("The %v filter on %q needs an array value.", pf.GetOp(), name)
			}
			if len(arr.GetValues()) == 0 || len(arr.GetValues()) > maxIn {
				return nil, invalid("The %v filter on %q needs 1 to %d values.", pf.GetOp(), name, maxIn)
			}
		case datastorepb.PropertyFilter_HAS_ANCESTOR:
			if name != keyProperty {
				return nil, invalid("HAS_ANCESTOR filters must be on __key__.")
			}
		default:
			return nil, invalid("Unknown property filter operator %v.", pf.GetOp())
		}
		if name == keyProperty {
			vals := []*datastorepb.Value{pf.GetValue()}
			if arr := pf.GetValue().GetArrayValue(); arr != nil {
				vals = arr.GetValues()
			}
			for _, v := range vals {
				k := v.GetKeyValue()
				if k == nil {
					return nil, invalid("A __key__ filter needs a key value.")
				}
				nk, kp, err := normKey(p.Project, p.Database, k)
				if err != nil {
					return nil, err
				}
				if kp != p {
					return nil, invalid("A __key__ filter's key must be in the query's partition.")
				}
				if err := checkPath(nk, false, false); err != nil {
					return nil, err
				}
				v.ValueType = &datastorepb.Value_KeyValue{KeyValue: nk}
			}
		}
		return &datastorepb.Filter{FilterType: &datastorepb.Filter_PropertyFilter{PropertyFilter: pf}}, nil
	}
	return nil, invalid("A filter must be a property or composite filter.")
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

// matches evaluates a filter tree against an entity.
func matches(f *datastorepb.Filter, e *datastorepb.Entity) bool {
	if pf := f.GetPropertyFilter(); pf != nil {
		return someValue(e, []*datastorepb.PropertyFilter{pf})
	}
	cf := f.GetCompositeFilter()
	if cf.GetOp() == datastorepb.CompositeFilter_OR {
		for _, sub := range cf.GetFilters() {
			if matches(sub, e) {
				return true
			}
		}
		return false
	}
	ineq := map[string][]*datastorepb.PropertyFilter{}
	for _, sub := range cf.GetFilters() {
		pf := sub.GetPropertyFilter()
		if pf != nil && isInequality(pf.GetOp()) {
			ineq[pf.GetProperty().GetName()] = append(ineq[pf.GetProperty().GetName()], pf)
			continue
		}
		if !matches(sub, e) {
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

// candidates are the values of a property that can place an entity in the
// order: those meeting the query's inequalities on it (the index range).
func (pl *plan) candidates(e *datastorepb.Entity, name string) []*datastorepb.Value {
	vals := indexValues(e, name)
	if pfs := pl.ineq[name]; len(pfs) > 0 {
		vals = slices.DeleteFunc(slices.Clone(vals), func(v *datastorepb.Value) bool { return !holdsAll(pfs, v) })
	}
	if pf := pl.eq[name]; pf != nil && len(pl.ineq[name]) == 0 {
		// The index row an equality matched is the one the query reads,
		// so ordering by that property sees the matched value (ties then
		// fall to the key), not the array's other elements.
		vals = slices.DeleteFunc(slices.Clone(vals), func(v *datastorepb.Value) bool { return !holds(pf, v) })
	}
	return vals
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
func (pl *plan) rows(res *datastorepb.EntityResult, key []byte) []row {
	e := res.Entity
	combos := [][]*datastorepb.Value{nil}
	for _, name := range pl.proj {
		vals := distinctValues(pl.candidates(e, name))
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
				vals := pl.candidates(e, o.prop)
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
// then the key, then the projected values.
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
func (pl *plan) collect(ctx context.Context, scan scanFunc, need int) (*result, error) {
	out := &result{complete: true}
	stream := pl.keyOrdered() && len(pl.distinct) == 0
	start := pl.start
	for {
		recs, next, err := scan(ctx, pl.ks, start, pl.end, scanPage)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			res, err := dscodec.DecodeValue(rec.Value)
			if err != nil {
				return nil, err
			}
			if !pl.wantKind(res.Entity) || (pl.filter != nil && !matches(pl.filter, res.Entity)) {
				continue
			}
			rs := pl.rows(res, rec.Key)
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
func (pl *plan) entityFor(r row, pm *datastorepb.PropertyMask) *datastorepb.EntityResult {
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
		mask(e, pm)
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
func (pl *plan) run(ctx context.Context, scan scanFunc, pm *datastorepb.PropertyMask, readVersion int64) (*datastorepb.QueryResultBatch, error) {
	page := maxBatch
	if pl.limit >= 0 {
		page = min(page, pl.limit)
	}
	res, err := pl.collect(ctx, scan, pl.offset+page+1)
	if err != nil {
		return nil, err
	}
	rows := res.rows
	b := &datastorepb.QueryResultBatch{EntityResultType: pl.resultType(), SnapshotVersion: readVersion, ReadTime: timestamppb.Now()}
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
	s, newID, done, err := f.openRead(req.GetReadOptions())
	if err != nil {
		return nil, err
	}
	defer done()
	batch, err := pl.run(ctx, f.scanner(s), req.GetPropertyMask(), f.readVersion())
	if err != nil {
		return nil, toStatus(err)
	}
	return &datastorepb.RunQueryResponse{Batch: batch, Query: q, Transaction: newID}, nil
}
